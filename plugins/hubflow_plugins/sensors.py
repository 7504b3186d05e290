"""The checkpoint health sensor: poke or deferrable, with an optional Event Hubs lag limit."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from hubflow_plugins.health import FAILING, HEALTHY
from hubflow_plugins.registry import load_registry, parse_duration


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
    :param allow_idle: a streaming job that is alive (fresh heartbeat) and commits nothing because
        no input arrives is healthy, not ``stalled`` (supervisors set it). Poke mode only.
    :param deferrable: wait in the triggerer instead of holding a worker slot.
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
        deferrable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name
        self.accept = tuple(accept)
        self.fail_on = tuple(fail_on)
        self.stalled_after = stalled_after
        self.max_lag_events = max_lag_events
        self.consumer_group = consumer_group
        self.allow_idle = allow_idle
        self.deferrable = deferrable

    def _stalled_after(self, job: Any) -> timedelta:
        return parse_duration(self.stalled_after) if self.stalled_after else job.stalled_after_delta

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        from hubflow_plugins.triggers import CheckpointHealthTrigger

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
        from hubflow_plugins.health import check_health

        job = load_registry().job(self.job_name)
        latest = None
        if self.max_lag_events is not None and job.eventhubs_conn_id:
            from hubflow_plugins.eventhubs_hook import EventHubsHook

            latest = EventHubsHook(job.eventhubs_conn_id).latest_sequence_numbers(self.consumer_group)
        live_state = None
        if self.allow_idle:
            from hubflow_plugins.job_control import JobControl

            live = JobControl(job.name, job.paths.status_dir).liveness()
            live_state = live.state if live.alive else None
            self.log.info("job status: %s", live.reason)
        result = check_health(
            job.paths.checkpoint_location,
            stalled_after=self._stalled_after(job),
            accept=self.accept,
            fail_on=self.fail_on,
            latest=latest,
            max_lag_events=self.max_lag_events,
            live_state=live_state,
        )
        self.log.info("checkpoint of job %s: %s: %s", job.name, result.verdict, result.reason)
        if result.lag:
            self.log.info("Event Hubs lag per partition: %s", result.lag)
        if result.failed:
            raise AirflowFailException(f"job {job.name}: checkpoint {result.verdict}: {result.reason}")
        return result.done
