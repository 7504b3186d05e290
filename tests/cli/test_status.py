"""``hubflow status``: the job's newest audit-trail entries, one line each, from its status folder."""

from __future__ import annotations

import json
from pathlib import Path

from hubflow.operations.audit import AuditEntry, append_audit, outcome
from hubflow.registry import load_registry
from hubflow.status import StatusFolder
from tests.cli.helpers import hubflow, output
from tests.dags.helpers import landing_job, write_registry


def test_status_prints_the_newest_audit_entries_one_line_each(tmp_path: Path) -> None:
    registry = write_registry(tmp_path, [landing_job(tmp_path, "clicks", streaming=True)])
    folder = StatusFolder(load_registry(registry).job("clicks").paths.status_dir)
    status = hubflow("status", "clicks", "--registry", registry)
    assert status.returncode == 0, output(status)
    assert "  audit " not in status.stdout, "no audit trail yet"

    hold = folder.place_hold("sink full", by="alice (run manual__1)").describe()
    for n in range(6):
        append_audit(
            folder,
            AuditEntry.now(
                by="alice (run manual__1)",
                action="stop",
                dry_run=n == 0,
                reason=f"sink full {n} token=hunter2",
                outcome=outcome("done", "held job clicks"),
                hold_before=None,
                hold_after=hold,
            ),
        )
    status = hubflow("status", "clicks", "--registry", registry)
    assert status.returncode == 0, output(status)
    lines = [line for line in status.stdout.splitlines() if line.startswith("  audit ")]
    assert len(lines) == 5, "the newest five"
    assert lines[0].startswith("  audit       20") and "(dry run)" not in "".join(lines)
    assert lines[0].endswith(
        ": stop because sink full 1 token=*** -> done: held job clicks; hold none -> " + hold
    ), lines[0]
    assert "sink full 5" in lines[-1] and "hunter2" not in status.stdout

    as_json = hubflow("status", "clicks", "--registry", registry, "--json")
    assert as_json.returncode == 0, output(as_json)
    (found,) = json.loads(as_json.stdout)
    assert len(found["audit"]) == 6 and found["audit"][0]["dry_run"] is True
    assert found["audit"][-1]["by"] == "alice (run manual__1)" and found["audit"][-1]["hold_after"] == hold


def test_status_shows_the_version_that_runs_since_when_and_the_one_before(tmp_path: Path) -> None:
    """Every start records the job's version (its config's and pipeline's digest, issue #48 item 1);
    a start of a changed job keeps the version it replaced. ``hubflow status`` shows both."""
    from hubflow.operations.job_control import JobControl
    from hubflow.supervision.supervisor import job_fingerprint

    registry = write_registry(tmp_path, [landing_job(tmp_path, "clicks", streaming=True)])
    job = load_registry(registry).job("clicks")
    control = JobControl(job.name, job.paths.status_dir)
    status = hubflow("status", "clicks", "--registry", registry)
    assert "  version     none recorded (no start by a supervisor or on-call yet)" in status.stdout

    first = job_fingerprint(job.config_path(), job.application)
    control.prepare_start(False, first)
    since = control.supervisor_state()["version"]["since"]
    control.prepare_start(True, first)  # a restart of the same version keeps its since
    assert (
        control.supervisor_state()["version"]["since"] == since and control.version() == first["digest"][:12]
    )

    job.config_path().write_text(job.config_path().read_text() + "\n# tuned\n")
    second = job_fingerprint(job.config_path(), job.application)
    assert second["digest"] != first["digest"], "a changed config is a new version"
    control.prepare_start(False, second)
    upgraded = control.supervisor_state()["version"]["since"]
    status = hubflow("status", "clicks", "--registry", registry)
    assert status.returncode == 0, output(status)
    assert (
        f"  version     {second['digest'][:12]} since {upgraded} (before: {first['digest'][:12]}, "
        f"{since} to {upgraded})"
    ) in status.stdout, status.stdout
    (found,) = json.loads(hubflow("status", "clicks", "--registry", registry, "--json").stdout)
    assert found["version"]["current"]["digest"] == second["digest"]
    assert found["version"]["previous"] == {
        "digest": first["digest"],
        "short": first["digest"][:12],
        "since": since,
        "until": upgraded,
    }


def test_status_prints_the_backlog_in_total_per_source_and_per_partition(tmp_path: Path) -> None:
    """The backlog the job's last progress reports (as the jobs runtime's listener keeps it): events
    and seconds behind in total, then per source with the partitions that are behind."""
    from hubflow.status import JobState, JobStatus
    from pyspark_eventhubs.backlog import PartitionBacklog, backlog_report

    registry = write_registry(tmp_path, [landing_job(tmp_path, "clicks", streaming=True)])
    folder = StatusFolder(load_registry(registry).job("clicks").paths.status_dir)
    report = backlog_report(
        {"0": PartitionBacklog(20, 12.5), "1": PartitionBacklog(0, 0.0), "2": PartitionBacklog(10, 3.25)}
    )
    source = {
        "description": "EventHubsStreamReader",
        "end_offset": {"hub1": {"0": 5, "1": 9, "2": 1}},
        "latest_offset": {"hub1": {"0": 25, "1": 9, "2": 11}},
        "num_input_rows": 7,
        "backlog": report,
    }
    progress = {"batch_id": 4, "timestamp": "2026-11-28T10:00:00Z", "num_input_rows": 7, "sources": [source]}
    JobStatus(folder, "clicks").update(state=JobState.RUNNING, last_progress=progress)

    status = hubflow("status", "clicks", "--registry", registry)
    assert status.returncode == 0, output(status)
    lines = status.stdout.splitlines()
    assert "  backlog     30, 12.5 s behind" in lines, status.stdout
    assert (
        "    source    EventHubsStreamReader: 30 events, 12.5 s behind (partition 0: 20 events, "
        "12.5 s behind; partition 2: 10 events, 3.2 s behind)"
    ) in lines, status.stdout

    as_json = hubflow("status", "clicks", "--registry", registry, "--json")
    (found,) = json.loads(as_json.stdout)
    assert found["lag"] == 30 and found["lag_seconds"] == 12.5
    assert found["backlog"] == [{"source": "EventHubsStreamReader", **report}]
