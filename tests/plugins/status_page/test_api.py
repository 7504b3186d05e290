"""The status page app against checkpoints and status folders written by real Spark streams."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from hubflow.progress.history import source_lag
from hubflow.redaction import redact
from hubflow_plugins.status_page.status_app import create_app
from tests.plugins.status_page.conftest import BATCH_SIZE, EVENT_COUNTS, SECRET, StatusWorld

pytestmark = pytest.mark.integration

TOTAL_EVENTS = sum(EVENT_COUNTS.values())
# 130 events in batches of 50: 50, 50, 30.
EXPECTED_ROWS = [BATCH_SIZE] * (TOTAL_EVENTS // BATCH_SIZE) + [TOTAL_EVENTS % BATCH_SIZE]


def client_for(world: StatusWorld, **options: Any) -> TestClient:
    """The app mounted under /hubflow on a parent app, as Airflow's API server mounts it."""
    parent = FastAPI()
    parent.mount("/hubflow", create_app(world.registry, **options))
    return TestClient(parent)


def test_job_list_shows_verdict_state_last_batch_and_lag(status_world: StatusWorld) -> None:
    response = client_for(status_world).get("/hubflow/api/jobs")
    assert response.status_code == 200
    jobs = {job["name"]: job for job in response.json()["jobs"]}
    assert list(jobs) == ["events_history", "events_plain", "orders_files", "never_ran", "broken_config"]

    events = jobs["events_history"]
    last = status_world.progress["events_history"][-1]
    assert events["verdict"] == "healthy" and events["ok"] is True
    assert events["state"] == "stopped" and events["alive"] is False
    assert events["last_batch"]["batch_id"] == last["batchId"]
    assert events["last_batch"]["num_input_rows"] == EXPECTED_ROWS[-1]
    assert events["lag"] == 0  # availableNow read the whole hub
    assert events["lag_seconds"] == 0.0
    [backlog] = events["backlog"]  # the Event Hubs source's own report, per partition
    assert backlog["eventsBehindLatest"] == 0 and set(backlog["partitions"]) == set(EVENT_COUNTS)
    assert events["backlog_lines"] == [f"{backlog['source']}: 0 events, 0.0 s behind"]
    assert events["heartbeat_age_seconds"] is not None and events["heartbeat_age_seconds"] < 600

    files = jobs["orders_files"]
    assert files["verdict"] == "healthy"
    assert files["last_batch"]["num_input_rows"] == 4
    assert files["last_batch"]["batch_id"] == status_world.progress["orders_files"][-1]["batchId"]

    never = jobs["never_ran"]
    assert never["verdict"] == "missing" and never["state"] is None and never["last_batch"] is None
    assert "no status.json" in never["liveness"]

    broken = jobs["broken_config"]
    assert broken["verdict"] is None and "cannot read job config" in broken["error"]


def test_history_file_gives_rate_and_lag_per_batch(status_world: StatusWorld) -> None:
    job = client_for(status_world).get("/hubflow/api/jobs/events_history").json()
    points = [p for p in job["history"] if p["num_input_rows"]]
    assert [p["num_input_rows"] for p in points] == EXPECTED_ROWS
    assert {p["origin"] for p in points} == {"progress_history.jsonl"}
    # Lag after each batch: what the hub holds minus what was read so far.
    read_so_far = [sum(EXPECTED_ROWS[: i + 1]) for i in range(len(EXPECTED_ROWS))]
    assert [p["lag"] for p in points] == [TOTAL_EVENTS - n for n in read_so_far]
    # Seconds behind: known for every batch (the events were sent at once: a span of under a second).
    assert all(0 <= p["lag_seconds"] < 1 for p in points) and points[-1]["lag_seconds"] == 0.0
    assert all(p["input_rows_per_second"] and p["input_rows_per_second"] > 0 for p in points[1:])
    spark_batches = [p["batchId"] for p in status_world.progress["events_history"]]
    assert [p["batch_id"] for p in points] == spark_batches


def test_history_without_file_comes_from_checkpoint_and_status(status_world: StatusWorld) -> None:
    job = client_for(status_world).get("/hubflow/api/jobs/events_plain").json()
    points = job["history"]
    batches = [p["batchId"] for p in status_world.progress["events_plain"]]
    assert [p["batch_id"] for p in points] == batches
    # The first batch has no earlier offsets to subtract from; every later one is exact.
    assert [p["num_input_rows"] for p in points][1:] == EXPECTED_ROWS[1:]
    assert all(p["input_rows_per_second"] > 0 for p in points[1:])
    # Lag is known only for the batch status.json reports (the checkpoint does not record it).
    assert points[-1]["lag"] == 0 and all(p["lag"] is None for p in points[:-1])


def test_page_lists_jobs_with_charts_and_shows_no_secret(status_world: StatusWorld) -> None:
    client = client_for(status_world)
    page = client.get("/hubflow/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    for name in ("events_history", "events_plain", "orders_files", "never_ran", "broken_config"):
        assert f'id="row-{name}"' in html
        assert f'id="chart-rate-{name}"' in html and f'id="chart-lag-{name}"' in html
        assert f'id="chart-lag-seconds-{name}"' in html
    assert 'class="verdict verdict-healthy"' in html and 'class="verdict verdict-missing"' in html
    assert 'src="/hubflow/static/status_page.js"' in html  # links follow the mount point
    assert client.get("/hubflow/static/status_page.js").status_code == 200
    assert client.get("/hubflow/static/status_page.css").status_code == 200

    embedded = re.search(r'<script type="application/json" id="initial-data">(.*?)</script>', html, re.S)
    assert embedded is not None
    initial = {job["name"]: job for job in json.loads(embedded.group(1))["jobs"]}
    assert len(initial["events_history"]["history"]) >= len(EXPECTED_ROWS)

    everything = html + client.get("/hubflow/api/jobs").text
    everything += "".join(client.get(f"/hubflow/api/jobs/{n}").text for n in initial)
    assert SECRET not in everything and "SharedAccessKey=" not in everything


def test_unknown_job_is_404(status_world: StatusWorld) -> None:
    response = client_for(status_world).get("/hubflow/api/jobs/nope")
    assert response.status_code == 404 and "nope" in response.json()["detail"]


def test_login_required_refuses_anonymous_requests(status_world: StatusWorld) -> None:
    client = client_for(status_world, require_login=True)
    for path in ("/hubflow/", "/hubflow/api/jobs", "/hubflow/api/jobs/events_history"):
        response = client.get(path)
        assert response.status_code == 401, path


def test_source_lag_of_event_hubs_and_file_offsets() -> None:
    end = {"hub1": {"0": 10, "1": 5}}
    latest = {"hub1": {"0": 15, "1": 5, "2": 7}}  # partition 2 not read yet
    assert source_lag(end, latest) == 12
    assert source_lag({"logOffset": 3}, {"logOffset": 5}) == 2
    assert source_lag(7, 9) == 2
    assert source_lag(end, None) is None
    assert source_lag("something", {"hub1": {}}) is None
    # A connector's reports riding in the latest offset (a job runtime that did not move them out).
    reports = {"$backlog": {"eventsBehindLatest": 12, "partitions": {}}, "$dataLoss": {"0": {"events": 1}}}
    assert source_lag(end, {**latest, **reports}) == 12


def test_redact_masks_keys_and_signatures() -> None:
    text = (
        "Endpoint=sb://ns/;SharedAccessKeyName=Root;SharedAccessKey=abc123=; "
        "url?sv=2024&sig=XyZ%3D&se=1 AccountKey=qwerty"
    )
    masked = redact(text)
    assert "abc123" not in masked and "XyZ" not in masked and "qwerty" not in masked
    assert "SharedAccessKeyName=Root" in masked  # the key's name is not a secret


def test_page_refresh_reads_only_new_offsets_files(status_world: StatusWorld) -> None:
    app = create_app(status_world.registry)
    parent = FastAPI()
    parent.mount("/hubflow", app)
    client = TestClient(parent)
    first = client.get("/hubflow/api/jobs/events_plain").json()
    offsets = [
        p for p in (status_world.base / "checkpoints/events_plain/offsets").iterdir() if p.name.isdigit()
    ]
    assert app.state.offsets_cache.reads == len(offsets)
    second = client.get("/hubflow/api/jobs/events_plain").json()
    assert app.state.offsets_cache.reads == len(offsets)  # nothing new planned: nothing re-read
    assert second["history"] == first["history"]


def test_history_file_is_read_from_its_end(status_world: StatusWorld, tmp_path: Path) -> None:
    """A history file of months costs the same to read: only its tail is parsed."""
    import fsspec

    from hubflow.progress.history import HISTORY_TAIL_BYTES, MAX_POINTS, read_history_file

    real = (status_world.base / "status/events_history/progress_history.jsonl").read_text().splitlines()
    template = json.loads(real[-1])
    lines = []
    batch_id = 0
    while sum(len(line) + 1 for line in lines) < 2 * HISTORY_TAIL_BYTES:
        lines.append(json.dumps({**template, "batch_id": batch_id}))
        batch_id += 1
    (tmp_path / "progress_history.jsonl").write_text("\n".join(lines) + "\n")
    points = read_history_file(fsspec.filesystem("file"), str(tmp_path))
    assert points is not None and len(points) == MAX_POINTS * 2
    assert [p["batch_id"] for p in points] == list(range(batch_id - MAX_POINTS * 2, batch_id))
    assert read_history_file(fsspec.filesystem("file"), str(tmp_path / "absent")) is None


def test_charts_keep_every_batch_the_page_saw_across_runs(spark: Any, tmp_path: Path) -> None:
    """A file-source job without a history file: points come from status.json at each refresh."""
    from tests.plugins.status_page.streams import job_config, run_job, write_registry

    landing = tmp_path / "landing"
    landing.mkdir()
    registry = write_registry(
        tmp_path,
        [
            {
                "name": "growing",
                "application": "files_to_lake",
                "config": str(job_config(tmp_path, "growing", {"path": str(landing)})),
                "mode": "streaming",
            }
        ],
    )
    parent = FastAPI()
    parent.mount("/hubflow", create_app(registry))
    client = TestClient(parent)
    seen = []
    for run, rows in enumerate((3, 5)):
        (landing / f"part-{run}.json").write_text("".join(f'{{"id": {run * 10 + i}}}\n' for i in range(rows)))
        df = spark.readStream.schema("id BIGINT").json(str(landing))
        progress = run_job(spark, tmp_path, "growing", df, with_history=False)
        seen.append(progress[-1]["batchId"])
        job = client.get("/hubflow/api/jobs/growing").json()
        assert job["last_batch"]["num_input_rows"] == rows
    history = {p["batch_id"]: p for p in job["history"]}
    assert [history[b]["num_input_rows"] for b in seen] == [3, 5]
    assert {history[b]["origin"] for b in seen} == {"status.json"}


def test_a_held_job_shows_who_held_it_and_its_driver_log_is_linked_with_secrets_masked(
    status_world: StatusWorld,
) -> None:
    from hubflow.registry import load_registry
    from hubflow.status import StatusFolder

    folder = StatusFolder(load_registry(status_world.registry).job("never_ran").paths.status_dir)
    client = client_for(status_world)
    assert client.get("/hubflow/api/jobs/never_ran/driver-log").status_code == 404
    folder.place_hold("migrating the sink", by="alice (run manual__1)")
    log = Path(folder.path("driver.log"))
    log.write_text(f"job never_ran starting\nEndpoint=sb://ns/;SharedAccessKey={SECRET}\nlast line\n")
    try:
        job = client.get("/hubflow/api/jobs/never_ran").json()
        assert job["state"] == "held" and job["driver_log"] is True
        assert job["hold"]["by"] == "alice (run manual__1)" and job["hold"]["reason"] == "migrating the sink"
        html = client.get("/hubflow/").text
        assert 'class="state state-held"' in html and "Held by alice (run manual__1) at " in html
        assert 'href="/hubflow/api/jobs/never_ran/driver-log"' in html
        text = client.get("/hubflow/api/jobs/never_ran/driver-log").text
        assert text.startswith("job never_ran starting") and text.rstrip().endswith("last line")
        assert SECRET not in text and "SharedAccessKey=***" in text
    finally:
        folder.release_hold()
        log.unlink()


def test_data_loss_in_status_json_is_listed_under_the_job(status_world: StatusWorld) -> None:
    """status.json's ``data_loss`` (written by the jobs listener) is shown as one line per partition."""
    from hubflow.registry import load_registry
    from hubflow.status import STATUS_FILE, JobStatus, StatusFolder

    folder = StatusFolder(load_registry(status_world.registry).job("never_ran").paths.status_dir)
    client = client_for(status_world)
    assert client.get("/hubflow/api/jobs/never_ran").json()["data_loss"] is None
    status = JobStatus(folder, "never_ran")
    status.update(data_loss={"EventHubs[ns/hub1]": {"0": {"events": 10, "lastLostRange": [20, 30]}}})
    try:
        job = client.get("/hubflow/api/jobs/never_ran").json()
        line = "EventHubs[ns/hub1] partition 0: 10 events expired before they were read"
        assert len(job["data_loss"]) == 1 and job["data_loss"][0].startswith(line)
        assert job["data_loss"][0].endswith("[20, 30))")
        html = client.get("/hubflow/").text
        assert f"<li>{line}" in html
    finally:
        folder.remove(STATUS_FILE)


def test_a_job_in_a_restart_backoff_shows_when_its_next_start_is_due(status_world: StatusWorld) -> None:
    """restarts.json and supervisor.json (written by the supervisor) give the backoff on the page."""
    from datetime import UTC, datetime, timedelta

    from hubflow.registry import load_registry
    from hubflow.status import RESTARTS_FILE, StatusFolder
    from hubflow.status.names import SUPERVISOR_FILE

    job = load_registry(status_world.registry).job("never_ran")
    folder = StatusFolder(job.paths.status_dir)
    client = client_for(status_world)
    assert client.get("/hubflow/api/jobs/never_ran").json()["restart_backoff"] is None
    now = datetime.now(UTC)
    for seconds in (100, 70, 10):  # a streak of 3: the next start 30 s * 2^2 after the last
        folder.record_restart(now - timedelta(seconds=seconds))
    try:
        backoff = client.get("/hubflow/api/jobs/never_ran").json()["restart_backoff"]
        assert (backoff["restarts"], backoff["pause_seconds"]) == (3, 120.0)
        assert backoff["next_start_at"] == (now - timedelta(seconds=10) + timedelta(seconds=120)).isoformat()
        assert "Next start due at" in backoff["text"]
        html = client.get("/hubflow/").text
        assert "Restarted by its supervisor 3 times since" in html
        folder.write_json(SUPERVISOR_FILE, {"job": "never_ran", "backoff_reset_at": now.isoformat()})
        assert client.get("/hubflow/api/jobs/never_ran").json()["restart_backoff"] is None

        # The version it runs (issue #48 item 1), from the same supervisor.json.
        assert client.get("/hubflow/api/jobs/never_ran").json()["version"] is None
        state = {"job": "never_ran", "version": {"digest": "a" * 64, "since": "T2"}}
        state["previous_version"] = {"digest": "b" * 64, "since": "T1", "until": "T2"}
        folder.write_json(SUPERVISOR_FILE, state)
        version = client.get("/hubflow/api/jobs/never_ran").json()["version"]
        assert version["text"] == f"{'a' * 12} since T2 (before: {'b' * 12}, T1 to T2)"
        assert f'<span class="version-text">{version["text"]}</span>' in client.get("/hubflow/").text
    finally:
        folder.remove(RESTARTS_FILE)
        folder.remove(SUPERVISOR_FILE)


def test_a_restarted_idle_run_shows_the_checkpoints_last_batch_and_no_lag(status_world: StatusWorld) -> None:
    """A run that found nothing new plans no batch: Spark reports it idle (``onQueryIdle``), not as
    progress. The page shows the checkpoint's last committed batch and lag 0, unless a batch is in
    flight; a run that is not idle gets no lag it cannot know."""
    from hubflow.registry import load_registry
    from hubflow.status import STATUS_FILE, JobState, JobStatus, StatusFolder

    paths = load_registry(status_world.registry).job("events_plain").paths
    folder = StatusFolder(paths.status_dir)
    saved = Path(folder.path(STATUS_FILE)).read_text()
    last_committed = status_world.progress["events_plain"][-1]["batchId"]
    offsets = Path(paths.checkpoint_location) / "offsets"
    client = client_for(status_world)
    try:
        run = JobStatus(folder, "events_plain")  # a new run: this process is its driver
        run.update(state=JobState.RUNNING)
        job = client.get("/hubflow/api/jobs/events_plain").json()
        assert job["alive"] is True and job["state"] == "running"
        assert job["last_batch"]["batch_id"] == last_committed and job["last_batch"]["num_input_rows"] is None
        assert job["last_batch"]["timestamp"] is not None
        assert job["lag"] is None

        run.update(state=JobState.IDLE)
        job = client.get("/hubflow/api/jobs/events_plain").json()
        assert job["state"] == "idle" and job["lag"] == 0
        html = client.get("/hubflow/").text
        assert f"#{last_committed}" in html

        # A batch planned and not committed yet: idle is stale, the lag is not known.
        (offsets / str(last_committed + 1)).write_text((offsets / str(last_committed)).read_text())
        job = client.get("/hubflow/api/jobs/events_plain").json()
        assert job["verdict"] == "batch-in-flight" and job["lag"] is None
    finally:
        (offsets / str(last_committed + 1)).unlink(missing_ok=True)
        Path(folder.path(STATUS_FILE)).write_text(saved)


def test_the_audit_trail_is_in_the_job_snapshot_and_on_the_page_with_secrets_masked(
    status_world: StatusWorld,
) -> None:
    """The job's audit.jsonl (written by the on-call operator) is in its snapshot, oldest first, and
    in a table in its section, newest first."""
    from hubflow.operations.audit import AuditEntry, append_audit, outcome
    from hubflow.registry import load_registry
    from hubflow.status import StatusFolder
    from hubflow.status.names import AUDIT_FILE

    folder = StatusFolder(load_registry(status_world.registry).job("never_ran").paths.status_dir)
    client = client_for(status_world)
    assert client.get("/hubflow/api/jobs/never_ran").json()["audit"] == []
    hold = "by alice (run manual__1) at 2026-11-28T02:00:00.000+00:00: sink full"
    append_audit(
        folder,
        AuditEntry.now(
            by="alice (run manual__1)",
            action="stop",
            dry_run=False,
            reason=f"sink full, key SharedAccessKey={SECRET}",
            outcome=outcome("done", "held job never_ran; nothing to stop"),
            hold_after=hold,
        ),
    )
    append_audit(
        folder,
        AuditEntry.now(
            by="bob (run manual__2)",
            action="start",
            dry_run=True,
            reason="sink fixed",
            outcome=outcome("done", "would release the hold; would start job never_ran"),
            hold_before=hold,
            hold_after=hold,
        ),
    )
    try:
        job = client.get("/hubflow/api/jobs/never_ran").json()
        stop, start = job["audit"]
        assert (stop["by"], stop["action"], stop["dry_run"]) == ("alice (run manual__1)", "stop", False)
        assert stop["reason"] == "sink full, key SharedAccessKey=***"
        assert (stop["hold_before"], stop["hold_after"], stop["source"]) == (None, hold, "airflow")
        assert (start["by"], start["dry_run"], start["hold_before"]) == ("bob (run manual__2)", True, hold)
        assert start["line"].endswith(
            "start (dry run) because sink fixed -> done: would release the "
            f"hold; would start job never_ran; held {hold}"
        )
        listed = {j["name"]: j for j in client.get("/hubflow/api/jobs").json()["jobs"]}
        assert listed["never_ran"]["audit"] == job["audit"] and listed["events_plain"]["audit"] == []
        html = client.get("/hubflow/").text
        section = html[html.index('id="audit-never_ran"') :]
        section = section[: section.index("</table>")]
        assert section.index("bob (run manual__2)") < section.index("alice (run manual__1)"), "newest first"
        assert 'start <span class="muted">(dry run)</span>' in section and "held job never_ran" in section
        assert SECRET not in html and 'id="audit-events_plain" hidden' in html
    finally:
        folder.remove(AUDIT_FILE)


def test_each_streaming_job_links_to_its_own_oncall_dag_in_airflows_ui(tmp_path: Path) -> None:
    from tests.dags.helpers import landing_job, write_registry

    jobs = [landing_job(tmp_path, "alpha", streaming=True), landing_job(tmp_path, "orders")]
    jobs.append(landing_job(tmp_path, "beta", streaming=True))
    parent = FastAPI()  # Airflow served under a path prefix, the page mounted as the plugin does
    parent.mount("/airflow/hubflow", create_app(write_registry(tmp_path, jobs)))
    html = TestClient(parent).get("/airflow/hubflow/").text
    assert re.findall(r'<section class="job" id="job-(\w+)"', html) == ["alpha", "orders", "beta"]
    for name in ("alpha", "beta"):
        section = re.search(rf'<section class="job" id="job-{name}".*?</section>', html, re.S).group(0)
        assert re.findall(r'class="oncall" href="([^"]+)"', section) == [f"/airflow/dags/{name}__oncall"]
    orders = re.search(r'<section class="job" id="job-orders".*?</section>', html, re.S).group(0)
    assert 'class="oncall"' not in orders, "a scheduled job has no on-call DAG"
