"""Which alerts a job's findings call for, given what was already said. Airflow-free, a pure function.

:func:`decide_alerts` takes the alert state kept in the job's status folder (``alerts.json``, see
:mod:`hubflow.status.names`), what one check found (:class:`Findings`) and the job's policy
(:class:`AlertPolicy`, from the registry's ``alerts:``) and gives the messages to send and the state
to keep. The streaming supervisor reads the findings, calls it, hands the messages to its notifiers
and writes the state back; a supervisor restarted, or running on another worker, reads the same
state and says nothing twice.

The rules:

* An alert is about one *slot*: the checkpoint (``stalled``, ``failed-batch`` or ``corrupt``: one
  verdict at a time), the restart loop (the supervisor refused another restart), the on-call hold
  (held longer than ``held_longer_than``), the backlog (lag over ``max_lag_events``, or over
  ``max_lag_seconds`` when the lag in seconds is known) and data loss (events that expired unread
  under ``failOnDataLoss=false``, as the driver's current run reports them in status.json).
* A slot that starts alerting gives one message; one that changes kind (``stalled`` then
  ``corrupt``) gives one message naming both; one that clears gives one ``resolved`` message. The
  same alert found again gives none, however often the supervisor runs. Data loss is an event, not
  a state: more events lost (or a loss in a new driver run) is a new message; it clears when the
  job's current run has lost nothing.
* A scheduled run that has not finished within the registry's ``finish_within`` is an event of
  its own, not a slot: Airflow's deadline alert calls :func:`deadline_missed_message` once per
  run that misses it (``hubflow_plugins.notifications.deadline_alerts``).
* What a check did not look at (``None`` in :class:`Findings`: the checkpoint of a held job, the
  restart limit on an on-call action, a lag nobody reported) leaves its slot as it was.

Every message names the job, the alert, its evidence (batch, lag, the exception's first line, the
hold) and the status page; free text goes through :func:`hubflow.redaction.redact`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from hubflow.redaction import redact


class AlertKind(StrEnum):
    """What an alert is about (the registry's ``alert_on`` names these)."""

    STALLED = "stalled"
    FAILED_BATCH = "failed-batch"
    CORRUPT = "corrupt"
    RESTART_LOOP = "restart-loop"
    HELD_TOO_LONG = "held-too-long"
    BACKLOG = "backlog"
    DATA_LOSS = "data-loss"
    UPGRADE_FAILED = "upgrade-failed"
    DEADLINE_MISSED = "deadline-missed"


ALERT_KINDS: tuple[str, ...] = tuple(str(kind) for kind in AlertKind)

#: The checkpoint verdicts that alert (``checkpoint_inspector.Verdict`` values).
CHECKPOINT_KINDS: tuple[str, ...] = (AlertKind.STALLED, AlertKind.FAILED_BATCH, AlertKind.CORRUPT)


class Slot(StrEnum):
    """One thing that alerts or not; at most one alert per slot is active."""

    CHECKPOINT = "checkpoint"
    RESTART_LOOP = "restart-loop"
    HOLD = "hold"
    BACKLOG = "backlog"
    DATA_LOSS = "data-loss"
    UPGRADE = "upgrade"


#: How a message names each alert.
_TITLES = {
    AlertKind.STALLED: "checkpoint stalled",
    AlertKind.FAILED_BATCH: "batch failed",
    AlertKind.CORRUPT: "checkpoint corrupt",
    AlertKind.RESTART_LOOP: "restart loop",
    AlertKind.HELD_TOO_LONG: "held too long",
    AlertKind.BACKLOG: "backlog over the limit",
    AlertKind.DATA_LOSS: "events lost (expired before they were read)",
    AlertKind.UPGRADE_FAILED: "upgrade failed (refused or rolled back)",
    AlertKind.DEADLINE_MISSED: "run missed its deadline (finish_within)",
}

FIRING = "firing"
RESOLVED = "resolved"


@dataclass(frozen=True)
class AlertPolicy:
    """What to alert on for one job (the registry's ``alerts:``, durations in seconds)."""

    alert_on: frozenset[str] = frozenset(ALERT_KINDS)
    held_longer_than_seconds: float | None = 86400.0
    max_lag_events: int | None = None
    max_lag_seconds: float | None = None
    status_page_url: str | None = None

    def link(self, job: str) -> str | None:
        """The job's section of the status page (``<status_page_url>#job-<name>``), or None."""
        if not self.status_page_url:
            return None
        return f"{self.status_page_url.split('#', 1)[0]}#job-{job}"


@dataclass(frozen=True)
class Findings:
    """What one check found about a job; ``None`` means "not looked at", which changes no alert.

    ``verdict``: the checkpoint's verdict and ``verdict_failed`` whether the health judgment counts it
    as failing (a live idle job's ``stalled`` does not). ``restart_refusal``: the supervisor's refusal
    text, ``""`` when it did not refuse, None when no restart was decided (an on-call action).
    ``held_seconds``: how long on-call has held the job, ``0``-or-more when held, None when not held.
    ``lag_events`` / ``lag_seconds``: the backlog, when known. ``lost_events``: events the driver's
    current run (``run_id``) skipped as expired, ``0`` when it lost none, None when no run reported;
    ``losses``: one sentence per source and partition.
    """

    job: str
    verdict: str | None = None
    verdict_failed: bool = False
    reason: str | None = None
    batch_id: int | None = None
    exception: str | None = None
    restart_refusal: str | None = None
    hold_checked: bool = True
    held_seconds: float | None = None
    held_by: str | None = None
    held_reason: str | None = None
    lag_events: int | None = None
    lag_seconds: float | None = None
    lost_events: int | None = None
    run_id: str | None = None
    losses: tuple[str, ...] = ()
    #: The last upgrade's failure (supervisor.json ``upgrade``), ``""`` when it did not fail, None
    #: when not looked at.
    upgrade_failure: str | None = None


@dataclass(frozen=True)
class AlertMessage:
    """One message to send: ``status`` is ``firing`` or ``resolved``; ``text`` is plain and redacted."""

    job: str
    kind: str
    status: str
    subject: str
    text: str
    link: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "kind": self.kind,
            "status": self.status,
            "subject": self.subject,
            "text": self.text,
            "link": self.link,
            "evidence": self.evidence,
        }


def first_line(text: Any) -> str | None:
    """The first non-empty line of ``text`` (an exception's message without its stack), redacted."""
    if not isinstance(text, str):
        return None
    for line in text.splitlines():
        if line.strip():
            return redact(line.strip())
    return None


def current_alerts(findings: Findings, policy: AlertPolicy) -> dict[Slot, tuple[str, dict[str, Any]] | None]:
    """Per slot that was looked at: the alert it calls for (kind, evidence), or None when it is clear.

    Slots the findings did not look at are absent.
    """
    found: dict[Slot, tuple[str, dict[str, Any]] | None] = {}
    enabled = policy.alert_on
    if findings.verdict is not None:
        kind = findings.verdict if findings.verdict_failed else None
        if kind in CHECKPOINT_KINDS and kind in enabled:
            evidence = {"verdict": kind, "reason": redact(findings.reason), "batch_id": findings.batch_id}
            if findings.exception:
                evidence["exception"] = first_line(findings.exception)
            found[Slot.CHECKPOINT] = (kind, evidence)
        else:
            found[Slot.CHECKPOINT] = None
    if findings.restart_refusal is not None:
        if findings.restart_refusal and AlertKind.RESTART_LOOP in enabled:
            evidence = {"refusal": redact(findings.restart_refusal)}
            if findings.exception:
                evidence["exception"] = first_line(findings.exception)
            found[Slot.RESTART_LOOP] = (str(AlertKind.RESTART_LOOP), evidence)
        else:
            found[Slot.RESTART_LOOP] = None
    if findings.hold_checked:
        limit = policy.held_longer_than_seconds
        held = findings.held_seconds
        if held is not None and limit is not None and held > limit and AlertKind.HELD_TOO_LONG in enabled:
            evidence = {
                "held_seconds": round(held),
                "limit_seconds": limit,
                "by": redact(findings.held_by),
                "reason": redact(findings.held_reason),
            }
            found[Slot.HOLD] = (str(AlertKind.HELD_TOO_LONG), evidence)
        else:
            found[Slot.HOLD] = None
    backlog = _backlog(findings, policy)
    if backlog is not _UNKNOWN:
        found[Slot.BACKLOG] = backlog  # type: ignore[assignment]
    if findings.lost_events is not None:
        if findings.lost_events > 0 and AlertKind.DATA_LOSS in enabled:
            evidence = {
                "lost_events": findings.lost_events,
                "run_id": findings.run_id,
                "losses": [redact(line) for line in findings.losses],
            }
            found[Slot.DATA_LOSS] = (str(AlertKind.DATA_LOSS), evidence)
        else:
            found[Slot.DATA_LOSS] = None
    if findings.upgrade_failure is not None:
        if findings.upgrade_failure and AlertKind.UPGRADE_FAILED in enabled:
            found[Slot.UPGRADE] = (
                str(AlertKind.UPGRADE_FAILED),
                {"upgrade": redact(findings.upgrade_failure)},
            )
        else:
            found[Slot.UPGRADE] = None
    return found


def _identity(kind: str | None, evidence: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """What makes an alert the same one found again: its kind; for data loss also the run and how
    many events it lost, so that each new loss is told."""
    if kind == AlertKind.DATA_LOSS:
        evidence = evidence or {}
        return (kind, evidence.get("run_id"), evidence.get("lost_events"))
    return (kind,)


_UNKNOWN = object()


def _backlog(findings: Findings, policy: AlertPolicy) -> Any:
    """The backlog alert, None when within the limits, ``_UNKNOWN`` when no known lag has a limit."""
    events, seconds = findings.lag_events, findings.lag_seconds
    checks = []
    if policy.max_lag_events is not None and events is not None:
        checks.append(events > policy.max_lag_events)
    if policy.max_lag_seconds is not None and seconds is not None:
        checks.append(seconds > policy.max_lag_seconds)
    if not checks:
        return _UNKNOWN
    if not any(checks) or AlertKind.BACKLOG not in policy.alert_on:
        return None
    evidence: dict[str, Any] = {"lag_events": events, "batch_id": findings.batch_id}
    if seconds is not None:
        evidence["lag_seconds"] = round(seconds)
    evidence["max_lag_events"] = policy.max_lag_events
    evidence["max_lag_seconds"] = policy.max_lag_seconds
    return (str(AlertKind.BACKLOG), evidence)


def decide_alerts(
    state: Mapping[str, Any] | None,
    findings: Findings,
    policy: AlertPolicy,
    now: datetime | None = None,
) -> tuple[list[AlertMessage], dict[str, Any]]:
    """The messages ``findings`` call for after ``state`` (alerts.json, or None), and the new state.

    The state is ``{"job", "active": {slot: {"kind", "since", "evidence"}}, "checked_at"}``.
    """
    now = now or datetime.now(UTC)
    active: dict[str, Any] = dict((state or {}).get("active") or {})
    messages: list[AlertMessage] = []
    link = policy.link(findings.job)
    for slot, alert in current_alerts(findings, policy).items():
        previous = active.get(str(slot))
        previous_kind = previous.get("kind") if isinstance(previous, dict) else None
        if alert is None:
            if previous_kind is not None:
                messages.append(_message(findings.job, previous_kind, RESOLVED, previous, link, now=now))
                active.pop(str(slot), None)
            continue
        kind, evidence = alert
        previous_evidence = previous.get("evidence") if isinstance(previous, dict) else None
        if _identity(kind, evidence) == _identity(previous_kind, previous_evidence):
            continue
        entry = {"kind": kind, "since": now.isoformat(), "evidence": evidence}
        messages.append(_message(findings.job, kind, FIRING, entry, link, was=previous_kind, now=now))
        active[str(slot)] = entry
    new_state = {"job": findings.job, "active": active, "checked_at": now.isoformat()}
    return messages, new_state


def _message(
    job: str,
    kind: str,
    status: str,
    entry: Mapping[str, Any],
    link: str | None,
    *,
    now: datetime,
    was: str | None = None,
) -> AlertMessage:
    title = _TITLES.get(kind, kind)  # type: ignore[call-overload]
    evidence = dict(entry.get("evidence") or {})
    if status == RESOLVED:
        subject = f"[hubflow] RESOLVED {job}: {title}"
        lines = [f"Job {job}: {title} ({kind}) is resolved, at {now.isoformat(timespec='seconds')}."]
        lines.append(f"It alerted since {entry.get('since')}.")
    else:
        subject = f"[hubflow] ALERT {job}: {title}"
        changed = f" (was {was})" if was and was != kind else ""
        lines = [f"Job {job}: {title} ({kind}){changed}, at {now.isoformat(timespec='seconds')}."]
    lines.extend(_evidence_lines(evidence))
    lines.append(f"Status page: {link}" if link else "Status page: /hubflow/ on the Airflow web server")
    text = redact("\n".join(lines))
    return AlertMessage(job, kind, status, redact(subject), text, link, evidence)


def _evidence_lines(evidence: Mapping[str, Any]) -> list[str]:
    lines = []
    if evidence.get("reason") and "verdict" in evidence:
        lines.append(f"Reason: {evidence['reason']}")
    if evidence.get("refusal"):
        lines.append(f"Supervisor: {evidence['refusal']}")
    if evidence.get("batch_id") is not None:
        lines.append(f"Batch: {evidence['batch_id']}")
    if evidence.get("lag_events") is not None or evidence.get("lag_seconds") is not None:
        parts = []
        if evidence.get("lag_events") is not None:
            limit = evidence.get("max_lag_events")
            parts.append(
                f"{evidence['lag_events']} events" + (f" (limit {limit})" if limit is not None else "")
            )
        if evidence.get("lag_seconds") is not None:
            limit = evidence.get("max_lag_seconds")
            parts.append(
                f"{evidence['lag_seconds']} s" + (f" (limit {limit:g} s)" if limit is not None else "")
            )
        lines.append("Lag: " + ", ".join(parts))
    if evidence.get("held_seconds") is not None:
        hours = evidence["held_seconds"] / 3600
        lines.append(
            f"Held: {hours:.1f} h (limit {evidence.get('limit_seconds', 0) / 3600:.1f} h) by "
            f"{evidence.get('by') or 'unknown'}: {evidence.get('reason') or 'no reason given'}"
        )
    if evidence.get("lost_events") is not None:
        lines.append(f"Lost: {evidence['lost_events']} events in driver run {evidence.get('run_id')}")
        lines.extend(f"  {line}" for line in evidence.get("losses") or [])
    if evidence.get("upgrade"):
        lines.append(f"Upgrade: {evidence['upgrade']}")
    if evidence.get("exception"):
        lines.append(f"Exception: {evidence['exception']}")
    return lines


def deadline_missed_message(
    job: str,
    *,
    dag_id: str,
    run_id: str,
    finish_within: str,
    deadline: datetime,
    now: datetime,
    run_state: str | None = None,
    queued_at: datetime | None = None,
    link: str | None = None,
) -> AlertMessage:
    """The page for a run of ``job`` (``dag_id``/``run_id``) not finished by ``deadline`` (queued at
    ``queued_at`` plus the registry's ``finish_within``), told at ``now``: how late, and the run's
    state when Airflow found the deadline missed (``queued``, ``running``, or ``failed``)."""
    late = max(0.0, (now - deadline).total_seconds())
    evidence: dict[str, Any] = {
        "dag_id": dag_id,
        "run_id": run_id,
        "finish_within": finish_within,
        "deadline": deadline.isoformat(timespec="seconds"),
        "late_seconds": round(late),
        "run_state": run_state,
        "queued_at": queued_at.isoformat(timespec="seconds") if queued_at else None,
    }
    kind = AlertKind.DEADLINE_MISSED
    lines = [
        f"Job {job}: {_TITLES[kind]} ({kind}), at {now.isoformat(timespec='seconds')}.",
        f"Run: {run_id} of DAG {dag_id}" + (f", {run_state} when the deadline passed" if run_state else ""),
        f"Deadline: {evidence['deadline']} (queued at {evidence['queued_at'] or 'unknown'} "
        f"+ finish_within {finish_within}), {_how_late(late)} late",
        f"Status page: {link}" if link else "Status page: /hubflow/ on the Airflow web server",
    ]
    subject = f"[hubflow] ALERT {job}: {_TITLES[kind]}: run {run_id}"
    return AlertMessage(job, str(kind), FIRING, redact(subject), redact("\n".join(lines)), link, evidence)


def _how_late(seconds: float) -> str:
    """``seconds`` as a person reads a delay: ``42 s``, ``3 min 5 s``, ``2 h 10 min``."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


# The supervisor's side: findings from the status folder, and one alerting cycle ----------------------


def lag_seconds(lag_events: int | None, progress: Mapping[str, Any] | None) -> float | None:
    """How long the backlog takes at the last batch's processing rate, or None when not known."""
    if lag_events is None or not progress:
        return None
    if lag_events == 0:
        return 0.0
    rate = progress.get("processed_rows_per_second")
    if not isinstance(rate, int | float) or rate <= 0:
        return None
    return lag_events / rate


def read_findings(
    job: str,
    folder: Any,
    *,
    health: Any = None,
    restart_refusal: str | None = None,
    now: datetime | None = None,
) -> Findings:
    """Findings from the job's status folder (``folder``: a ``StatusFolder``) and, when given, a
    health judgment (``core.health.HealthResult``; None when the checkpoint was not judged).

    The lag comes from status.json's last progress as the status page shows it: the backlog its
    sources report (events and seconds behind, ``pyspark_eventhubs.backlog``), or latest minus end
    offsets; seconds no source reports are estimated at the last batch's processing rate
    (:func:`lag_seconds`). An idle job has read everything (lag 0). Data loss is
    status.json's ``data_loss`` (the current run's, see ``hubflow_jobs.runtime.listener``).
    """
    from hubflow.progress.history import progress_lag, progress_lag_seconds
    from hubflow.status import JobState, parse_state
    from hubflow.status.data_loss import data_loss_lines, lost_events
    from hubflow.status.documents import age_seconds

    now = now or datetime.now(UTC)
    status = folder.status() or {}
    hold = folder.hold()
    progress = status.get("last_progress") if isinstance(status.get("last_progress"), dict) else None
    lag = progress_lag(progress)
    seconds = progress_lag_seconds(progress)
    if parse_state(status.get("state")) == JobState.IDLE:
        lag, seconds = 0, 0.0
    if seconds is None:
        seconds = lag_seconds(lag, progress)
    batch_id = progress.get("batch_id") if progress else None
    if batch_id is None and health is not None:
        batch_id = (health.report or {}).get("latest_commit_batch_id")
    held_seconds = None
    if hold is not None:
        held_seconds = age_seconds(hold.at, now) if hold.at else None
        held_seconds = held_seconds if held_seconds is not None else 0.0
    return Findings(
        job=job,
        verdict=None if health is None or health.verdict == JobState.HELD else health.verdict,
        verdict_failed=bool(health is not None and health.failed),
        reason=health.reason if health is not None else None,
        batch_id=batch_id if isinstance(batch_id, int) else None,
        exception=first_line(status.get("exception")),
        restart_refusal=restart_refusal,
        held_seconds=held_seconds,
        held_by=hold.by if hold is not None else None,
        held_reason=hold.reason if hold is not None else None,
        lag_events=None if hold is not None else lag,
        lag_seconds=None if hold is not None else seconds,
        lost_events=lost_events(status.get("data_loss")) if status else None,
        run_id=str(status["run_id"]) if status.get("run_id") else None,
        losses=tuple(data_loss_lines(status.get("data_loss")) or ()),
        upgrade_failure=_upgrade_failure(folder),
    )


def _upgrade_failure(folder: Any) -> str:
    """The text of the last upgrade when it failed (refused, rolled back, held), else ``""``."""
    from hubflow.status.names import SUPERVISOR_FILE
    from hubflow.supervision.upgrades import UPGRADE_KEY, UpgradeOutcome

    record = (folder.read_json(SUPERVISOR_FILE) or {}).get(UPGRADE_KEY)
    if not isinstance(record, dict) or record.get("outcome") not in {
        str(o) for o in UpgradeOutcome if o.failed
    }:
        return ""
    return str(record.get("text") or record.get("outcome"))


def alert_cycle(
    folder: Any,
    findings: Findings,
    policy: AlertPolicy,
    send: Any,
    now: datetime | None = None,
) -> list[AlertMessage]:
    """One alerting cycle: read alerts.json, decide, ``send`` the messages, write alerts.json.

    ``send(messages)`` returns the messages that reached no receiver; their slots keep their old
    state, so the next check tries again (a receiver that got it then gets it twice: at least once).
    Returns the messages sent.
    """
    from hubflow.status.names import ALERTS_FILE

    previous = folder.read_json(ALERTS_FILE) or {}
    messages, state = decide_alerts(previous, findings, policy, now)
    if not messages:
        if previous.get("active") != state["active"] or not previous:
            folder.write_json(ALERTS_FILE, state)
        return []
    failed = set(map(id, send(messages) or []))
    old_active = dict(previous.get("active") or {})
    for message in messages:
        if id(message) in failed:
            slot = _slot_of(message.kind)
            if slot in old_active:
                state["active"][slot] = old_active[slot]
            else:
                state["active"].pop(slot, None)
    folder.write_json(ALERTS_FILE, state)
    return [m for m in messages if id(m) not in failed]


def _slot_of(kind: str) -> str:
    if kind in CHECKPOINT_KINDS:
        return str(Slot.CHECKPOINT)
    return str(
        {
            AlertKind.RESTART_LOOP: Slot.RESTART_LOOP,
            AlertKind.HELD_TOO_LONG: Slot.HOLD,
            AlertKind.BACKLOG: Slot.BACKLOG,
            AlertKind.DATA_LOSS: Slot.DATA_LOSS,
            AlertKind.UPGRADE_FAILED: Slot.UPGRADE,
        }[AlertKind(kind)]
    )
