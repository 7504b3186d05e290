"""The checkpoint health sensor: poke or deferrable, with an optional Event Hubs lag limit.

A backfill run skips it (its interval is read as a batch; the job's checkpoint is not its concern),
and, for supervisors, a job held by on-call is reported, not judged.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from hubflow.durations import parse_duration
from hubflow.registry import load_registry
from hubflow.status import JobState
from hubflow.supervision.health import FAILING, HEALTHY, HealthCheck
from hubflow_plugins.run_context import is_backfill_run
from pyspark_eventhubs import DEFAULT_CONSUMER_GROUP


class CheckpointHealthSensor(BaseSensorOperator):
    """Wait until a job's checkpoint is healthy; fail at once on a verdict waiting cannot mend.

    :param job_name: the job's name in the registry; its config gives the checkpoint location.
    :param accept: verdicts that end the wait well (default ``healthy``; a streaming job's
        supervisor also accepts ``batch-in-flight``).
    :param fail_on: verdicts that fail the task at once (default failed-batch, stalled, corrupt,
        missing).
    :param stalled_after: no commit for longer than this is ``stalled`` (default: the registry's).
    :param max_lag_events: with the job's Event Hubs connection, fail when the committed offsets are
        more than this many events behind the hub (summed over partitions).
    :param allow_idle: idle is not stalled: a ``stalled`` or ``missing`` checkpoint is healthy when
        a streaming job is alive (fresh heartbeat) and commits nothing because no input arrives,
        or when a scheduled job's last run finished having read no input.
    :param skip_when_held: a job held by on-call (``HOLD``) is reported and not judged (the
        supervisor sets it: a held job is meant to be stopped).
    :param deferrable: judge once, and when that says wait, wait in the triggerer instead of
        holding a worker slot; the trigger makes the same judgment as a poke
        (:func:`hubflow.supervision.health.judge`).

    In a backfill run the sensor is skipped (and with it what follows, e.g. archiving).
    """

    template_fields = ("job_name",)
    ui_color = "#98fb98"

    def __init__(
        self,
        *,
        job_name: str,
        accept: tuple[str, ...] = HEALTHY,
        fail_on: tuple[str, ...] = FAILING,
        stalled_after: str | None = None,
        max_lag_events: int | None = None,
        consumer_group: str = DEFAULT_CONSUMER_GROUP,
        allow_idle: bool = False,
        skip_when_held: bool = False,
        deferrable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name
        # Plain strings (a Verdict is a StrEnum): the lists travel to the triggerer serialized.
        self.accept = tuple(str(verdict) for verdict in accept)
        self.fail_on = tuple(str(verdict) for verdict in fail_on)
        self.stalled_after = stalled_after
        self.max_lag_events = max_lag_events
        self.consumer_group = consumer_group
        self.allow_idle = allow_idle
        self.skip_when_held = skip_when_held
        self.deferrable = deferrable

    def _stalled_after(self, job: Any) -> timedelta:
        return parse_duration(self.stalled_after) if self.stalled_after else job.stalled_after_delta

    def _health_check(self, job: Any) -> HealthCheck:
        """What to judge, from the registry's job and this task's parameters."""
        return HealthCheck(
            checkpoint=job.paths.checkpoint_location,
            stalled_after_seconds=self._stalled_after(job).total_seconds(),
            accept=self.accept,
            fail_on=self.fail_on,
            status_dir=job.paths.status_dir,
            heartbeat_timeout_seconds=job.heartbeat_timeout.total_seconds(),
            streaming=job.mode == "streaming",
            allow_idle=self.allow_idle,
            skip_when_held=self.skip_when_held,
            max_lag_events=self.max_lag_events if job.eventhubs_conn_id else None,
        )

    def execute(self, context: Any) -> Any:
        if is_backfill_run(context):
            raise AirflowSkipException(
                f"backfill run: job {self.job_name}'s checkpoint belongs to its scheduled runs, not to "
                "this interval's batch read; its health is not judged here"
            )
        if not self.deferrable:
            return super().execute(context)
        # Judge once here: most checks answer at once (a supervisor's always does: every verdict is
        # accepted or failing), and a deferral would cost a trigger and a second start of the task.
        # Only a check that must wait hands the wait to the triggerer.
        from hubflow_plugins.hooks.azure_storage import use_job_storage

        job = use_job_storage(load_registry().job(self.job_name))
        check = self._health_check(job)
        if self._judge(job, check):
            return None
        from hubflow_plugins.triggers.checkpoint_health import CheckpointHealthTrigger

        self.defer(
            trigger=CheckpointHealthTrigger(
                **check.to_dict(),
                poke_interval=float(self.poke_interval),
                eventhubs_conn_id=job.eventhubs_conn_id,
                consumer_group=self.consumer_group,
                storage_conn_id=job.storage_conn_id,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)) if self.timeout else None,
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        for note in event.get("notes") or []:
            self.log.info("%s", note)
        self._report(event["verdict"], event["reason"], event.get("lag"), event.get("failed"))
        return event

    def poke(self, context: Any) -> bool:
        from hubflow_plugins.hooks.azure_storage import use_job_storage

        job = use_job_storage(load_registry().job(self.job_name))
        return self._judge(job, self._health_check(job))

    def _judge(self, job: Any, check: HealthCheck) -> bool:
        """One judgment, reported (a failing one fails the task); whether the wait is over."""
        from hubflow.supervision.health import judge

        latest = None
        if check.max_lag_events is not None:
            from hubflow_plugins.hooks.eventhubs import EventHubsHook

            latest = EventHubsHook(job.eventhubs_conn_id).latest_sequence_numbers(self.consumer_group)
        result = judge(check, latest)
        for note in result.notes:
            self.log.info("%s", note)
        self._report(result.verdict, result.reason, result.lag, result.failed)
        return result.done

    def _report(self, verdict: str, reason: str, lag: dict[str, int] | None, failed: bool | None) -> None:
        """Log the judgment; a failing one fails the task without retry (waiting will not mend it)."""
        if verdict == JobState.HELD:
            self.log.info("job %s is %s", self.job_name, reason)
            return
        self.log.info("checkpoint of job %s: %s: %s", self.job_name, verdict, reason)
        if lag:
            self.log.info("Event Hubs lag per partition: %s", lag)
        if failed:
            raise AirflowFailException(f"job {self.job_name}: checkpoint {verdict}: {reason}")
