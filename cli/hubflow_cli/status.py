"""``hubflow status [JOB]``: what the status page shows of each registered job, in the terminal.

The facts come from the status page's own snapshot (``hubflow.progress.job_snapshots``,
Airflow-free): the checkpoint's verdict, the state and liveness from ``status.json``, the last batch,
the backlog (in total, and per source and partition: events, files or versions, and seconds behind
the newest), the on-call hold, the newest entries of the audit trail (who did what to the job). The
lease holder is read from the job's status folder (its ``lease``
document, :mod:`hubflow.status`). Nothing is changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hubflow.progress.history import ProgressSamples
from hubflow.progress.job_snapshots import job_snapshot
from hubflow.redaction import redact
from hubflow.registry import RegisteredJob, RegistryError, load_registry, registry_path
from hubflow.status import LEASE_FILE, StatusFolder
from hubflow.status.exit_codes import EXIT_CONFIG_ERROR, EXIT_OK
from hubflow_cli.output import mask_job_variables

#: How many of the newest audit-trail entries are printed per job (``--json`` has the snapshot's).
AUDIT_PRINTED = 5


def lease_holder(job: RegisteredJob) -> dict[str, Any] | None:
    """The job's lease document (who runs it: pid, host, since, last renewal), None when free."""
    lease = StatusFolder(job.paths.status_dir).read_json(LEASE_FILE)
    if not lease:
        return None
    keys = ("pid", "host", "started_at", "renewed_at")
    return {key: redact(lease.get(key)) for key in keys}


def snapshot(job: RegisteredJob, samples: ProgressSamples) -> dict[str, Any]:
    """The status page's snapshot of ``job`` with its lease holder added (``lease``)."""
    found = job_snapshot(job, samples)
    found["lease"] = None
    if not found.get("error"):
        try:
            found["lease"] = lease_holder(job)
        except Exception as exc:  # storage unreachable: say so on the job's lines
            found["error"] = f"cannot read the lease: {redact(str(exc))}"
    return found


def describe(found: dict[str, Any]) -> list[str]:
    """The lines printed for one job's snapshot."""
    schedule = f" {found['schedule']}" if found.get("schedule") else ""
    lines = [f"{found['name']}  ({found['application']}, {found['mode']}{schedule})"]

    def add(label: str, value: Any) -> None:
        lines.append(f"  {label:<11} {value}")

    state = found.get("state") or "unknown"
    add("state", f"{state} ({found['liveness']})" if found.get("liveness") else state)
    if found.get("verdict"):
        add("checkpoint", f"{found['verdict']}: {found.get('reason')}")
    batch = found.get("last_batch")
    if batch:
        rows = batch.get("num_input_rows")
        add(
            "last batch",
            f"{batch.get('batch_id')} at {batch.get('timestamp')}"
            + (f", {rows} input rows" if rows is not None else ""),
        )
    else:
        add("last batch", "none yet")
    if found.get("lag") is not None:
        seconds = found.get("lag_seconds")
        add("backlog", f"{found['lag']}" + (f", {seconds:.1f} s behind" if seconds is not None else ""))
    for line in found.get("backlog_lines") or []:
        add("  source", line)
    version = found.get("version")
    if version or not found.get("error"):
        add(
            "version",
            version["text"] if version else "none recorded (no start by a supervisor or on-call yet)",
        )
    hold = found.get("hold")
    add("held", f"yes, by {hold.get('by')} at {hold.get('at')}: {hold.get('reason')}" if hold else "no")
    lease = found.get("lease")
    if lease:
        add(
            "lease",
            f"pid {lease['pid']} on host {lease['host']} since {lease['started_at']}, "
            f"renewed {lease['renewed_at']}",
        )
    elif not found.get("error"):
        add("lease", "free")
    for table in found.get("delta_tables") or []:
        add("delta table", f"{table.get('table')} version {table.get('version')}: {table.get('agreement')}")
    if found.get("exception"):
        add("exception", found["exception"])
    for line in found.get("data_loss") or []:
        add("data loss", line)
    for entry in (found.get("audit") or [])[-AUDIT_PRINTED:]:
        add("audit", entry.get("line"))
    if found.get("error"):
        add("error", found["error"])
    return lines


def show_status(name: str | None, *, registry: Path | None, as_json: bool = False) -> int:
    """The ``hubflow status`` command: 0, or 2 when the registry or the job name is wrong."""
    try:
        loaded = load_registry(registry or registry_path())
        jobs = [loaded.job(name)] if name else loaded.jobs
    except RegistryError as exc:
        print(f"hubflow status: {exc}")
        return EXIT_CONFIG_ERROR
    for job in jobs:
        mask_job_variables(job.config_path())
    samples = ProgressSamples()
    found = [snapshot(job, samples) for job in jobs]
    if as_json:
        print(json.dumps(found, indent=2, default=str))
    else:
        print("\n\n".join("\n".join(describe(item)) for item in found))
    return EXIT_OK
