"""The checkpoint health sensor: poke or deferrable, with an optional Event Hubs lag limit.

A backfill run skips it (its interval is read as a batch; the job's checkpoint is not its concern),
and, for supervisors, a job held by on-call is reported, not judged.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from hubflow_jobs.durations import parse_duration
from hubflow_plugins.core.health import FAILING, HEALTHY
from hubflow_plugins.core.registry import load_registry
from hubflow_plugins.run_context import is_backfill_run


class CheckpointHealthSensor(BaseSensorOperator):
    """Wait until a job's checkpoint is healthy; fail at once on a verdict waiting cannot mend.

    :param job_name: the job's name in the registry; its config gives the checkpoint location.
    :param accept: verdicts that end the wait well (default ``healthy``; a streaming job's
        supervisor also accepts ``batch-in-flight``).
    :param fail_on: verdicts that fail the task at once (default failed-batch, stalled, corrupt,
        missing).
    :param stalled_after: no commit for longer than this is ``stalled`` (default: the registry's).
    :param max_lag_events: with the job's Event Hubs connection, fail when the committed offsets are
        more than this many events behind the hub (summed over partitions). Poke mode only.
    :param allow_idle: idle is not stalled: a ``stalled`` or ``missing`` checkpoint is healthy when
        a streaming job is alive (fresh heartbeat) and commits nothing because no input arrives,
        or when a scheduled job's last run finished having read no input. Poke mode only.
    :param skip_when_held: a job held by on-call (``HOLD``) is reported and not judged (the
        supervisor sets it: a held job is meant to be stopped). Poke mode only.
    :param deferrable: wait in the triggerer instead of holding a worker slot.

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
        consumer_group: str = "$Default",
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

    def execute(self, context: Any) -> Any:
        if is_backfill_run(context):
            raise AirflowSkipException(
                f"backfill run: job {self.job_name}'s checkpoint belongs to its scheduled runs, not to "
                "this interval's batch read; its health is not judged here"
            )
        if not self.deferrable:
            return super().execute(context)
        from hubflow_plugins.triggers.checkpoint_health import CheckpointHealthTrigger

        job = load_registry().job(self.job_name)
        self.defer(
            trigger=CheckpointHealthTrigger(
                checkpoint=job.paths.checkpoint_location,
                stalled_after_seconds=self._stalled_after(job).total_seconds(),
                accept=list(self.accept),
                fail_on=list(self.fail_on),
                poke_interval=float(self.poke_interval),
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout)) if self.timeout else None,
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        self.log.info("checkpoint of job %s: %s: %s", self.job_name, event["verdict"], event["reason"])
        if event.get("failed"):
            raise AirflowFailException(
                f"job {self.job_name}: checkpoint {event['verdict']}: {event['reason']}"
            )
        return event

    def poke(self, context: Any) -> bool:
        from hubflow_plugins.core.health import check_health

        job = load_registry().job(self.job_name)
        latest = None
        if self.max_lag_events is not None and job.eventhubs_conn_id:
            from hubflow_plugins.hooks.eventhubs import EventHubsHook

            latest = EventHubsHook(job.eventhubs_conn_id).latest_sequence_numbers(self.consumer_group)
        live_state, ran_without_input = None, False
        if self.allow_idle or self.skip_when_held:
            from hubflow_jobs.status_folder import StatusFolder
            from hubflow_plugins.core.health import finished_without_input

            folder = StatusFolder(job.paths.status_dir)
            live = folder.liveness(job.heartbeat_timeout.total_seconds())
            self.log.info("job status: %s", live.reason)
            if self.skip_when_held and live.hold is not None and not live.alive:
                self.log.info("job %s is held %s: its health is not judged", job.name, live.hold.describe())
                return True
            if self.allow_idle and job.mode == "streaming":
                live_state = live.state if live.alive else None
            elif self.allow_idle:
                ran_without_input = finished_without_input(folder.status())
        result = check_health(
            job.paths.checkpoint_location,
            stalled_after=self._stalled_after(job),
            accept=self.accept,
            fail_on=self.fail_on,
            latest=latest,
            max_lag_events=self.max_lag_events,
            live_state=live_state,
            ran_without_input=ran_without_input,
        )
        self.log.info("checkpoint of job %s: %s: %s", job.name, result.verdict, result.reason)
        if result.lag:
            self.log.info("Event Hubs lag per partition: %s", result.lag)
        if result.failed:
            raise AirflowFailException(f"job {job.name}: checkpoint {result.verdict}: {result.reason}")
        return result.done
