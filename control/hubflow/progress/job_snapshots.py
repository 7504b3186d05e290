"""One snapshot per registered job: health verdict, state, heartbeat, last batch, backlog, history.

Everything comes from files other parts of hubflow already keep: the registry (which jobs exist),
the checkpoint (the inspector's verdict), the job's status folder (``status.json`` written by the
jobs runtime, the on-call ``HOLD``, ``driver.log``; see ``hubflow.status``) and the logs
of the Delta tables it writes (version, and the last batch each records for the query beside Spark's
last commit). A job whose config or storage cannot be read gets an ``error`` in its snapshot instead
of breaking the page for every other job.

Secrets never leave this module: strings shown to the user pass through :func:`redact`, which
masks connection string keys, SAS signatures and account keys wherever they appear.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hubflow.progress.backlog_text import backlog_lines
from hubflow.progress.history import (
    OffsetsCache,
    ProgressSamples,
    history_from_checkpoint,
    merge_points,
    progress_backlogs,
    progress_lag,
    progress_lag_seconds,
    read_history_file,
)
from hubflow.redaction import redact
from hubflow.status.data_loss import data_loss_lines

#: The keys of a progress shown as the job's last batch.
_LAST_BATCH_KEYS = (
    "batch_id",
    "timestamp",
    "num_input_rows",
    "input_rows_per_second",
    "processed_rows_per_second",
    "batch_duration_ms",
)
#: How many of the newest audit-trail entries a snapshot carries (oldest first).
AUDIT_SHOWN = 10


def load_jobs(registry_path: Path | None = None) -> list[Any]:
    """The registered jobs (``hubflow.registry``), in registry order."""
    from hubflow.registry import load_registry

    return list(load_registry(registry_path).jobs)


def job_snapshot(
    job: Any,
    samples: ProgressSamples,
    *,
    with_history: bool = False,
    offsets_cache: OffsetsCache | None = None,
    now: datetime | None = None,
    use_storage: Callable[[Any], Any] | None = None,
) -> dict[str, Any]:
    """What the status page shows of one registered job (plain JSON types, secrets masked).

    ``use_storage(job)`` first, when given: the status page registers the job's storage connection
    with it (``hubflow_plugins.hooks.azure_storage.use_job_storage``); ``hubflow status`` has no
    Airflow and reads with the storage access of its environment.
    """
    now = now or datetime.now(UTC)
    snapshot: dict[str, Any] = {
        "name": job.name,
        "mode": job.mode,
        "schedule": job.schedule,
        "application": job.application,
        "verdict": None,
        "ok": None,
        "reason": None,
        "state": None,
        "alive": None,
        "liveness": None,
        "heartbeat": None,
        "heartbeat_age_seconds": None,
        "last_batch": None,
        "lag": None,
        "lag_seconds": None,
        "backlog": [],
        "backlog_lines": [],
        "exception": None,
        "data_loss": None,
        "restart_backoff": None,
        "hold": None,
        "version": None,
        "audit": [],
        "driver_log": False,
        "checkpoint_location": None,
        "delta_tables": [],
        "error": None,
    }
    try:
        paths = job.paths
        if use_storage is not None:
            use_storage(job)
    except Exception as exc:  # registry/config/connection problems: show them on the job's row
        snapshot["error"] = redact(str(exc))
        return snapshot
    snapshot["checkpoint_location"] = redact(paths.checkpoint_location)
    errors = []
    report = None
    try:
        report = _fill_verdict(snapshot, job, paths.checkpoint_location, now)
    except Exception as exc:  # storage unreachable: the verdict is unknown, not "missing"
        errors.append(f"cannot read the checkpoint: {redact(str(exc))}")
    if paths.delta_sinks:
        try:
            _fill_delta_tables(snapshot, paths, report)
        except Exception as exc:
            errors.append(f"cannot read a Delta table's log: {redact(str(exc))}")
    try:
        _fill_status(snapshot, job, paths.status_dir, samples, now, report)
    except Exception as exc:
        errors.append(f"cannot read the status folder: {redact(str(exc))}")
    try:
        snapshot["audit"] = audit_entries(paths.status_dir)
        snapshot["version"] = job_version(paths.status_dir)
    except Exception as exc:
        errors.append(f"cannot read the audit trail: {redact(str(exc))}")
    if with_history:
        try:
            snapshot["history"] = job_history(job.name, paths, samples, offsets_cache)
        except Exception as exc:
            snapshot["history"] = samples.points(job.name)
            errors.append(f"cannot read the batch history: {redact(str(exc))}")
    snapshot["error"] = "; ".join(errors) or None
    return snapshot


def _fill_verdict(snapshot: dict[str, Any], job: Any, checkpoint: str, now: datetime) -> Any:
    from hubflow.checkpoints.inspector import inspect_checkpoint

    report = inspect_checkpoint(checkpoint, stalled_after=job.stalled_after_delta, now=now)
    snapshot["verdict"] = report.verdict.value
    snapshot["ok"] = report.ok
    snapshot["reason"] = redact(report.reason)
    return report


def _fill_delta_tables(snapshot: dict[str, Any], paths: Any, report: Any) -> None:
    from hubflow.checkpoints.inspector import inspect_delta_sinks

    sinks = [(sink.table, sink.checkpoint) for sink in paths.delta_sinks]
    snapshot["delta_tables"] = [
        {key: redact(value) for key, value in found.to_dict().items()}
        for found in inspect_delta_sinks(sinks, report)
    ]


def _fill_status(
    snapshot: dict[str, Any],
    job: Any,
    status_dir: str,
    samples: ProgressSamples,
    now: datetime,
    report: Any = None,
) -> None:
    """State, liveness, last batch and lag from the status folder (and the checkpoint's report).

    The lag is in events (files, versions) and seconds, in total and per source (``backlog``: each
    reporting source's totals and partitions, ``hubflow.progress.history.progress_backlogs``).

    A run that has not planned a batch yet (a restart that found nothing new) has no progress of
    its own: its last batch is then the checkpoint's last committed one. Spark reports a trigger
    that found no new input as idle (``onQueryIdle``), not as progress, so a live ``idle`` job with
    no batch in flight has read everything its sources hold: its lag is 0.
    """
    from hubflow.status import DRIVER_LOG_FILE, JobState, StatusFolder, parse_state

    folder = StatusFolder(status_dir)
    snapshot["driver_log"] = folder.exists(DRIVER_LOG_FILE)
    live = folder.liveness(job.heartbeat_timeout.total_seconds(), now=now)
    if live.hold is not None:
        snapshot["hold"] = {
            key: redact(value) for key, value in live.hold.to_dict().items() if key != "target"
        }
    status = folder.status()
    if job.mode == "streaming" and live.hold is None:  # a job that dies at start has no status.json
        snapshot["restart_backoff"] = restart_backoff(job, folder, live.alive, status or {}, now)
    if status is None:
        snapshot["liveness"] = f"no status.json in {redact(status_dir)} yet"
        if live.hold is not None:
            snapshot["state"] = str(live.shown_state)
        return
    progress = status.get("last_progress") if isinstance(status.get("last_progress"), dict) else None
    samples.record(job.name, progress)
    shown = live.shown_state
    snapshot.update(
        state=str(shown) if shown is not None else status.get("state"),
        alive=live.alive,
        liveness=redact(live.reason),
        heartbeat=status.get("heartbeat"),
        heartbeat_age_seconds=live.heartbeat_age_seconds,
        exception=redact(status.get("exception")),
        lag=progress_lag(progress),
        lag_seconds=progress_lag_seconds(progress),
        backlog=progress_backlogs(progress),
        backlog_lines=[redact(line) for line in backlog_lines(progress_backlogs(progress))],
        data_loss=data_loss_lines(status.get("data_loss")),
    )
    if progress:
        snapshot["last_batch"] = {key: progress.get(key) for key in _LAST_BATCH_KEYS}
    elif report is not None and report.latest_commit_batch_id is not None:
        snapshot["last_batch"] = committed_batch(report)
    in_flight = report is not None and report.latest_offsets_batch_id != report.latest_commit_batch_id
    if live.alive and parse_state(status.get("state")) == JobState.IDLE and not in_flight:
        snapshot["lag"] = 0
        snapshot["lag_seconds"] = 0.0


def audit_entries(status_dir: str, limit: int = AUDIT_SHOWN) -> list[dict[str, Any]]:
    """The newest ``limit`` entries of the job's audit trail, oldest first, each with its ``line``
    (what ``hubflow status`` prints); texts masked (they are stored masked, and masked again here)."""
    from hubflow.operations.audit import read_audit
    from hubflow.status import StatusFolder

    shown = []
    for entry in read_audit(StatusFolder(status_dir), limit):
        fields = {key: redact(value) for key, value in entry.to_dict().items()}
        fields["line"] = redact(entry.line())
        shown.append(fields)
    return shown


def job_version(status_dir: str) -> dict[str, Any] | None:
    """The version the job runs (``{"current", "previous", "upgrade", "text"}``, from supervisor.json;
    ``text`` names an upgrade in progress or failed), or None before any start recorded one."""
    from hubflow.status import StatusFolder
    from hubflow.status.names import SUPERVISOR_FILE
    from hubflow.supervision.upgrades import UPGRADE_KEY, UpgradeOutcome, UpgradeRecord
    from hubflow.supervision.versions import SHORT, version_text, versions

    state = StatusFolder(status_dir).read_json(SUPERVISOR_FILE) or {}
    current, previous = versions(state)
    if current is None:
        return None
    text = version_text(state) or ""
    record = UpgradeRecord.from_dict(state.get(UPGRADE_KEY))
    if record is not None and record.outcome != UpgradeOutcome.READY:
        text += f"; upgrade {record.versions_text()}: {record.outcome} (since {record.started_at})"
    elif record is not None and record.first_batch_pending:
        text += f"; upgrade {record.versions_text()}: ready while idle, on probation until its first batch"
        if record.waiting:
            text += f"; version {record.waiting[:SHORT]}, deployed since, waits for it"
    return {
        "current": current.to_dict(),
        "previous": previous.to_dict() if previous is not None else None,
        "upgrade": {"outcome": record.outcome, "text": redact(record.text)} if record is not None else None,
        "text": text,
    }


def restart_backoff(
    job: Any, folder: Any, alive: bool, status: dict[str, Any], now: datetime
) -> dict[str, Any] | None:
    """The supervisor's restart backoff for the job (``core.supervision.backoff_view``), from
    restarts.json, supervisor.json and the registry's restart policy; None outside a streak."""
    from hubflow.status.names import RESTARTS_FILE, SUPERVISOR_FILE
    from hubflow.supervision.supervisor import backoff_view
    from hubflow.utc_times import utc_time

    restarts = [utc_time(t) for t in (folder.read_json(RESTARTS_FILE) or {}).get("restarts", [])]
    state = folder.read_json(SUPERVISOR_FILE) or {}
    return backoff_view(
        [t for t in restarts if t is not None],
        now=now,
        policy=job.restart_policy,
        alive=alive,
        backoff_reset_at=utc_time(state.get("backoff_reset_at")),
        last_alive_at=utc_time(status.get("heartbeat")),
    )


def committed_batch(report: Any) -> dict[str, Any]:
    """``last_batch`` from a checkpoint report: the last committed batch's id and commit time (the
    checkpoint does not record rows or rates)."""
    batch: dict[str, Any] = dict.fromkeys(_LAST_BATCH_KEYS)
    batch["batch_id"] = report.latest_commit_batch_id
    if report.latest_commit_time is not None:
        batch["timestamp"] = report.latest_commit_time.isoformat()
    return batch


def driver_log_tail(job: Any, max_bytes: int, use_storage: Callable[[Any], Any] | None = None) -> str | None:
    """The end of the job's ``driver.log`` (secrets masked), or None when there is none.

    A tail of ``max_bytes`` starts inside a line: that line's end is left out, since the cut may fall
    inside a secret's key (``...SharedAccessK|ey=<secret>``), which the masking could not recognise.
    """
    from hubflow.status import StatusFolder

    if use_storage is not None:
        use_storage(job)
    data = StatusFolder(job.paths.status_dir).driver_log_tail(max_bytes)
    if data is None:
        return None
    if len(data) >= max_bytes:
        data = data.partition(b"\n")[2]
    return redact(data.decode("utf-8", errors="replace"))


def job_history(
    name: str, paths: Any, samples: ProgressSamples, offsets_cache: OffsetsCache | None = None
) -> list[dict[str, Any]]:
    """The chart points of one job: the history file if any, else checkpoint plus samples."""
    from hubflow.storage.azure import url_to_fs

    status_fs, status_root = url_to_fs(paths.status_dir)
    from_file = read_history_file(status_fs, status_root)
    if from_file is not None:
        return merge_points(samples.points(name), from_file)
    checkpoint_fs, checkpoint_root = url_to_fs(paths.checkpoint_location)
    derived = history_from_checkpoint(checkpoint_fs, checkpoint_root, offsets_cache)
    return merge_points(derived, samples.points(name))
