"""Judging a job's health from its checkpoint, its status folder and optionally its Event Hubs lag.
No Airflow import.

:func:`judge` is the one judgment the poke-mode sensor and the deferrable trigger both make, from a
:class:`HealthCheck` (what to judge, plain values that travel to the triggerer): the checkpoint's
verdict, stalled after how long, idle not stalled when the job is alive or ran dry, a job held by
on-call reported and not judged, and the lag limit.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from hubflow.checkpoints.inspector import Verdict
from hubflow.registry import MIN_HEARTBEAT_TIMEOUT
from hubflow.status import WORKING_STATES, JobState, StatusFolder, parse_state

#: Verdicts that end a health check well.
HEALTHY: tuple[Verdict, ...] = (Verdict.HEALTHY,)
#: A streaming job is also fine while a batch runs.
HEALTHY_STREAMING: tuple[Verdict, ...] = (Verdict.HEALTHY, Verdict.BATCH_IN_FLIGHT)
#: Verdicts that end a health check badly at once: waiting will not mend them.
FAILING: tuple[Verdict, ...] = (Verdict.FAILED_BATCH, Verdict.STALLED, Verdict.CORRUPT, Verdict.MISSING)
#: Verdicts that only mean "no new input" while the job itself is alive, or after a run without input.
IDLE_VERDICTS: tuple[Verdict, ...] = (Verdict.STALLED, Verdict.MISSING)


@dataclass
class HealthResult:
    """One check: the inspector's verdict, the lag when asked for, and whether that is acceptable."""

    verdict: str
    reason: str
    done: bool
    failed: bool
    lag: dict[str, int] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    #: What the judgment read besides the checkpoint (the job's liveness), for the task log.
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "done": self.done,
            "failed": self.failed,
            "lag": self.lag,
            "notes": self.notes,
        }


@dataclass(frozen=True)
class HealthCheck:
    """What one health check judges: plain values, so the deferrable trigger carries them as is.

    ``status_dir`` and ``heartbeat_timeout_seconds`` locate and time the job's liveness, read when
    ``allow_idle`` or ``skip_when_held`` asks for it; ``streaming`` says which idle applies (a live
    driver, or a scheduled run that read nothing). ``max_lag_events`` needs the hub's latest sequence
    numbers, which the caller reads (the Airflow connection is not the control plane's).
    """

    checkpoint: str
    stalled_after_seconds: float
    accept: tuple[str, ...] = tuple(str(v) for v in HEALTHY)
    fail_on: tuple[str, ...] = tuple(str(v) for v in FAILING)
    status_dir: str | None = None
    heartbeat_timeout_seconds: float = MIN_HEARTBEAT_TIMEOUT.total_seconds()
    streaming: bool = False
    allow_idle: bool = False
    skip_when_held: bool = False
    max_lag_events: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (tuples as lists), for a trigger's serialization."""
        fields = asdict(self)
        return {key: list(value) if isinstance(value, tuple) else value for key, value in fields.items()}


def judge(check: HealthCheck, latest: tuple[str, dict[str, int]] | None = None) -> HealthResult:
    """The health of the job ``check`` describes (``latest``: the hub's next sequence numbers, for the lag).

    A job held by on-call and not running is reported as ``held`` and not judged (a held job is meant
    to be stopped) when ``skip_when_held``; otherwise :func:`check_health` decides, with the idle
    exceptions ``allow_idle`` asks for.
    """
    notes: list[str] = []
    live_state, ran_without_input = None, False
    if check.status_dir and (check.allow_idle or check.skip_when_held):
        folder = StatusFolder(check.status_dir)
        live = folder.liveness(check.heartbeat_timeout_seconds)
        notes.append(f"job status: {live.reason}")
        if check.skip_when_held and live.hold is not None and not live.alive:
            reason = f"held {live.hold.describe()}: its health is not judged"
            return HealthResult(str(JobState.HELD), reason, done=True, failed=False, notes=notes)
        if check.allow_idle and check.streaming:
            live_state = live.state if live.alive else None
        elif check.allow_idle:
            ran_without_input = finished_without_input(folder.status())
    result = check_health(
        check.checkpoint,
        stalled_after=timedelta(seconds=check.stalled_after_seconds),
        accept=check.accept,
        fail_on=check.fail_on,
        latest=latest,
        max_lag_events=check.max_lag_events,
        live_state=live_state,
        ran_without_input=ran_without_input,
    )
    result.notes = notes
    return result


def check_health(
    checkpoint: str,
    *,
    stalled_after: timedelta,
    accept: tuple[str, ...] = HEALTHY,
    fail_on: tuple[str, ...] = FAILING,
    latest: tuple[str, dict[str, int]] | None = None,
    max_lag_events: int | None = None,
    live_state: str | None = None,
    ran_without_input: bool = False,
) -> HealthResult:
    """Inspect ``checkpoint``; with ``latest`` (hub, partition -> next sequence number) also the lag.

    Idle is not stalled. ``live_state`` is the state of a running job whose heartbeat is fresh
    (from its status folder), or None: a streaming job that is alive commits nothing while no input
    arrives. ``ran_without_input`` says a scheduled job's last run finished having read nothing
    (:func:`finished_without_input`). For both, ``stalled`` (no recent commit) and ``missing`` (no
    batch planned yet) mean "idle", not "broken"; the lag check, when asked for, still catches a
    live job that does not keep up.
    """
    from hubflow.checkpoints.inspector import inspect_checkpoint

    report = inspect_checkpoint(checkpoint, stalled_after=stalled_after)
    verdict = str(report.verdict)
    result = HealthResult(
        verdict=verdict,
        reason=report.reason,
        done=verdict in accept,
        failed=verdict in fail_on and verdict not in accept,
        report=report.to_dict(),
    )
    state = parse_state(live_state)
    if verdict in IDLE_VERDICTS and state in WORKING_STATES:
        result.done, result.failed = True, False
        result.reason = f"{report.reason} The job is alive ({state}), so it is waiting for new input."
    elif verdict in IDLE_VERDICTS and ran_without_input:
        result.done, result.failed = True, False
        result.reason = f"{report.reason} The job's last run found no new input: idle, not stalled."
    if latest is not None and not result.failed:
        hub, next_sequence = latest
        committed = committed_sequence_numbers(result.report, hub)
        result.lag = {p: max(0, n - committed.get(p, 0)) for p, n in next_sequence.items()}
        total = sum(result.lag.values())
        if max_lag_events is not None and total > max_lag_events:
            result.done, result.failed = False, True
            result.reason = (
                f"{result.reason} Event Hubs lag is {total} events (over the limit {max_lag_events}): "
                + ", ".join(f"partition {p}: {n}" for p, n in sorted(result.lag.items()))
            )
    return result


def finished_without_input(status: dict[str, Any] | None) -> bool:
    """Whether a job's status.json shows a run that ended normally having read no row.

    ``stopped`` with neither an exception nor a stop reason is an availableNow run that ran dry;
    ``input_rows`` counts what that run read.
    """
    if not status:
        return False
    return (
        parse_state(status.get("state")) == JobState.STOPPED
        and not status.get("exception")
        and not status.get("stop_reason")
        and status.get("input_rows") == 0
    )


def committed_sequence_numbers(report: dict[str, Any], hub: str) -> dict[str, int]:
    """Per partition, the end sequence number of the newest committed batch for ``hub``.

    Offsets are the Event Hubs connector's checkpoint JSON ``{"<hub>": {"0": <seq>, ...}}``, or Spark's
    Kafka source's (a ``kind: eventhubs_kafka`` source): the same shape and numbers, an Event Hubs
    Kafka offset being the event's sequence number.
    """
    return _end_sequence_numbers(report, hub, "committed_end_offset")


def planned_sequence_numbers(report: dict[str, Any], hub: str) -> dict[str, int]:
    """Per partition, the end sequence number of the newest planned batch (committed or not)."""
    return _end_sequence_numbers(report, hub, "end_offset")


def _end_sequence_numbers(report: dict[str, Any], hub: str, key: str) -> dict[str, int]:
    # The connector owns its offset JSON; imported here (it imports pyspark) so that DAG parsing,
    # which imports this module's verdict lists, never loads Spark.
    from pyspark_eventhubs.offsets import offset_seqs

    for source in report.get("sources") or []:
        raw = source.get(key) if isinstance(source, dict) else None
        if raw is None:
            continue
        try:
            offsets = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            continue
        if isinstance(offsets, dict) and isinstance(offsets.get(hub), dict):
            return offset_seqs(offsets, hub)
    return {}
