"""files_to_lake end to end on the session's local Spark: output, quarantine, reconciliation,
archiving, exactly-once replay, graceful stop by marker and by SIGTERM, failures."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest

from hubflow.status.exit_codes import EXIT_FAILED, EXIT_OK
from hubflow_jobs.builtins.files_to_lake import FilesToLakeConfig
from hubflow_jobs.pipeline.job import start_function
from hubflow_jobs.runtime.runner import run_job
from hubflow_jobs.runtime.stop import SignalHandlers, StopRequest
from tests.support.processes import wait_until

from .helpers import (
    files_to_lake_config,
    lake_tables,
    landing_config,
    log_ids,
    read_lake,
    read_status,
    run_files_to_lake,
    write_config,
    write_json_landing_file,
)

pytestmark = pytest.mark.integration


def _config(base: Path, **overrides: Any) -> FilesToLakeConfig:
    return files_to_lake_config(write_config(base / "job.yaml", landing_config(base, **overrides)))


def _run(spark: Any, config: FilesToLakeConfig, stop: StopRequest | None = None) -> tuple[int, str]:
    return run_files_to_lake(spark, config, stop)


def _local(uri: str) -> str:
    return unquote(urlparse(uri).path)


def _archived(base: Path) -> set[str]:
    """Original paths of the files in the archive (Spark archives to archive_dir + original path)."""
    archive = base / "archive"
    return (
        {"/" + str(p.relative_to(archive)) for p in archive.rglob("*") if p.is_file()}
        if archive.exists()
        else set()
    )


def _committed_files(checkpoint: Path) -> set[str]:
    """Landing files of the batches the query committed, from the file source's log in the checkpoint."""
    committed = set(log_ids(checkpoint / "commits"))
    files = set()
    for log_file in sorted((checkpoint / "sources" / "0").glob("[0-9]*")):
        for line in log_file.read_text().splitlines()[1:]:
            entry = json.loads(line)
            if entry["batchId"] in committed:
                files.add(_local(entry["path"]))
    return files


def test_available_now_lands_good_rows_quarantines_bad_ones_and_reconciles(
    spark: Any, tmp_path: Path
) -> None:
    config = _config(tmp_path)
    landing = tmp_path / "landing"
    expected = set()
    expected |= write_json_landing_file(landing, "a.json", 1, good=5, bad=2)
    expected |= write_json_landing_file(landing, "b.json", 100, good=3, bad=3)
    expected |= write_json_landing_file(landing, "c.json", 200, good=4, bad=0)
    lines_written = 5 + 2 + 3 + 3 + 4

    code, reason = _run(spark, config)

    assert code == EXIT_OK, reason
    assert reason == "job files_to_lake finished: no more input (trigger availableNow)"
    rows = read_lake(spark, lake_tables(config)[0])
    ids = [r["id"] for r in rows]
    assert sorted(ids) == sorted(expected), "every good record exactly once"
    today = datetime.now(UTC).date()
    assert {r["ingest_date"] for r in rows} == {today}
    assert all(r["name"] == f"n{r['id']}" for r in rows)
    assert {Path(_local(r["_source_file"])).name for r in rows} == {"a.json", "b.json", "c.json"}
    assert (Path(lake_tables(config)[0]) / f"ingest_date={today.isoformat()}").is_dir()

    quarantined = read_lake(spark, lake_tables(config)[1])
    assert len(quarantined) == 5
    assert len(ids) + len(quarantined) == lines_written, "read = written + quarantined"
    not_json = [q for q in quarantined if q["raw_record"].startswith("not json")]
    no_id = [q for q in quarantined if q["reason"] == "required column id is null"]
    assert len(not_json) == 3 and len(no_id) == 2
    assert {q["reason"] for q in not_json} == {"json record does not parse with the declared schema"}
    assert {q["raw_record"] for q in not_json} == {
        "not json a.json 0",
        "not json b.json 0",
        "not json b.json 2",
    }
    assert all(json.loads(q["raw_record"]) == {"name": "no id"} for q in no_id)  # parsed, re-encoded
    assert {Path(_local(q["source_file"])).name for q in not_json} == {"a.json", "b.json"}

    status = read_status(tmp_path)
    assert status["state"] == "stopped" and status["exception"] is None
    assert status["counts"] == {"read": lines_written, "written": len(ids), "quarantined": 5}
    progress = status["last_progress"]
    assert progress["batch_id"] == 1  # 3 files, at most 2 per trigger
    assert progress["sources"][0]["description"].startswith("FileStreamSource")
    assert progress["sources"][0]["end_offset"] == {"logOffset": 1}
    assert status["query_id"] and status["run_id"]

    # One line per progress event in progress_history.jsonl: the status page's charts.
    history = tmp_path / "status" / "files_to_lake" / "progress_history.jsonl"

    def batches_in_history() -> list[int]:
        lines = history.read_text().splitlines() if history.exists() else []
        return [json.loads(line)["batch_id"] for line in lines]

    wait_until(lambda: {0, 1} <= set(batches_in_history()), 10, "both batches in progress_history.jsonl")
    assert [b for b in batches_in_history() if b in (0, 1)] == [0, 1]
    # Each batch's backlog, measured by the runtime: c.json waits after batch 0, nothing after batch 1.
    backlogs = {
        p["batch_id"]: p["sources"][0]["backlog"] for p in map(json.loads, history.read_text().splitlines())
    }
    assert [backlogs[b]["filesBehindLatest"] for b in (0, 1)] == [1, 0]
    assert backlogs[0]["secondsBehindLatest"] >= 0 and backlogs[1]["secondsBehindLatest"] == 0.0

    # Files of the committed first batch are archived; Spark archives a batch's files when it plans
    # the next batch, so the last batch's file waits in the landing folder for the next run.
    checkpoint = Path(config.checkpoint_location)
    assert _archived(tmp_path) == {str(landing / "a.json"), str(landing / "b.json")}
    assert [p.name for p in landing.iterdir() if not p.name.startswith(".")] == ["c.json"]

    more = write_json_landing_file(landing, "d.json", 300, good=2, bad=1)
    code, reason = _run(spark, config)
    assert code == EXIT_OK, reason
    ids = [r["id"] for r in read_lake(spark, lake_tables(config)[0])]
    assert sorted(ids) == sorted(expected | more), "the second run adds only the new file"
    assert len(read_lake(spark, lake_tables(config)[1])) == 6
    assert str(landing / "c.json") in _archived(tmp_path)
    assert _archived(tmp_path) <= _committed_files(checkpoint)


def test_replayed_batch_is_not_written_twice(spark: Any, tmp_path: Path) -> None:
    """A driver killed after the sinks committed but before Spark's commit log replays the batch."""
    config = _config(tmp_path, source={"max_files_per_trigger": 1})
    landing = tmp_path / "landing"
    expected = write_json_landing_file(landing, "a.json", 1, good=3, bad=1)
    expected |= write_json_landing_file(landing, "b.json", 10, good=3, bad=1)
    assert _run(spark, config)[0] == EXIT_OK
    checkpoint = Path(config.checkpoint_location)
    last = log_ids(checkpoint / "commits")[-1]
    (checkpoint / "commits" / str(last)).unlink()  # as if killed between the sink commit and this file
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)

    code, reason = _run(spark, config)

    assert code == EXIT_OK, reason
    assert log_ids(checkpoint / "commits")[-1] == last, "the batch was run again"
    ids = [r["id"] for r in read_lake(spark, lake_tables(config)[0])]
    assert sorted(ids) == sorted(expected)
    assert len(read_lake(spark, lake_tables(config)[1])) == 2
    assert read_status(tmp_path)["counts"]["read"] == 4, "the replay read the batch again"


def test_csv_with_header_quarantines_malformed_rows(spark: Any, tmp_path: Path) -> None:
    config = _config(
        tmp_path, source={"format": "csv", "options": {"header": True}, "schema": "id INT, name STRING"}
    )
    landing = tmp_path / "landing"
    (landing / "orders.csv").write_text("id,name\n1,alpha\ntwo,beta\n3,gamma\n4,delta,extra\n,nameless\n")

    assert _run(spark, config)[0] == EXIT_OK

    assert sorted(r["id"] for r in read_lake(spark, lake_tables(config)[0])) == [1, 3]
    quarantined = {q["raw_record"]: q["reason"] for q in read_lake(spark, lake_tables(config)[1])}
    assert quarantined == {
        "two,beta": "csv record does not parse with the declared schema",
        "4,delta,extra": "csv record does not parse with the declared schema",
        '{"name":"nameless"}': "required column id is null",
    }


def test_parquet_rows_missing_required_columns_are_quarantined(spark: Any, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    config = _config(tmp_path, source={"format": "parquet", "schema": "id BIGINT, name STRING"})
    table = pa.table({"id": [1, None, 3], "name": ["a", "b", None]})
    pq.write_table(table, tmp_path / "landing" / "part.parquet")

    assert _run(spark, config)[0] == EXIT_OK

    assert sorted(r["id"] for r in read_lake(spark, lake_tables(config)[0])) == [1, 3]
    [bad] = read_lake(spark, lake_tables(config)[1])
    assert (bad["raw_record"], bad["reason"]) == ('{"name":"b"}', "required column id is null")
    assert Path(_local(bad["source_file"])).name == "part.parquet"


@pytest.mark.parametrize("how", ["marker", "sigterm"])
def test_processing_time_run_stops_gracefully_and_archives_only_committed_files(
    spark: Any, tmp_path: Path, how: str
) -> None:
    config = _config(
        tmp_path,
        trigger={"availableNow": False, "processingTime": "2 seconds"},
        source={"max_files_per_trigger": 1},
    )
    landing = tmp_path / "landing"
    every_file = set()
    for index in range(8):
        write_json_landing_file(landing, f"f{index}.json", index * 10, good=3, bad=1)
        every_file.add(str(landing / f"f{index}.json"))
    checkpoint = Path(config.checkpoint_location)

    def ask_to_stop() -> None:
        wait_until(lambda: len(log_ids(checkpoint / "commits")) >= 2, 120, "two committed batches")
        if how == "marker":
            (tmp_path / "status" / "files_to_lake" / "STOP").touch()
        else:
            os.kill(os.getpid(), signal.SIGTERM)

    stop = StopRequest()
    asker = threading.Thread(target=ask_to_stop, daemon=True)
    with SignalHandlers(stop):
        asker.start()
        code, reason = _run(spark, config, stop)
    asker.join(5)

    assert code == EXIT_OK, reason
    expected_reason = "stop marker" if how == "marker" else "SIGTERM received by the Python driver"
    assert reason.startswith("job files_to_lake stopped gracefully: ") and expected_reason in reason
    status = read_status(tmp_path)
    assert status["state"] == "stopped" and expected_reason in status["stop_reason"]
    planned, committed_ids = log_ids(checkpoint / "offsets"), log_ids(checkpoint / "commits")
    assert planned[: len(committed_ids)] == committed_ids and len(planned) - len(committed_ids) <= 1, (
        "the running batch finished; at most a batch that was only being planned was left for the restart"
    )

    committed = _committed_files(checkpoint)
    assert 2 <= len(committed) < len(every_file), "stopped part way, as the test intends"
    wait_until(lambda: len(_archived(tmp_path)) >= len(committed) - 1, 10, "the archiver")
    time.sleep(0.5)
    archived = _archived(tmp_path)
    assert archived <= committed, "only files of committed batches are archived"
    still_landing = {str(p) for p in landing.iterdir() if not p.name.startswith(".")}
    assert every_file - committed <= still_landing, "uncommitted files stay where they landed"
    assert still_landing | archived == every_file
    sources = {_local(r["_source_file"]) for r in read_lake(spark, lake_tables(config)[0])}
    assert sources == committed, "the lake holds exactly the committed files"


def test_a_query_that_cannot_start_fails_with_the_reason(spark: Any, tmp_path: Path) -> None:
    config = _config(tmp_path, source={"schema": "id BIGNUMBER, name STRING"})
    write_json_landing_file(tmp_path / "landing", "a.json", 1, good=1, bad=0)

    code, reason = _run(spark, config)

    assert code == EXIT_FAILED
    assert reason.startswith("job files_to_lake failed to start its query: ")
    assert "BIGNUMBER" in reason
    status = read_status(tmp_path)
    assert status["state"] == "failed" and "BIGNUMBER" in status["exception"]


def test_a_batch_that_fails_ends_the_run_with_the_reason(spark: Any, tmp_path: Path) -> None:
    config = _config(tmp_path, source={"format": "parquet", "schema": "id BIGINT, name STRING"})
    (tmp_path / "landing" / "broken.parquet").write_bytes(b"this is not parquet at all")

    code, reason = _run(spark, config)

    assert code == EXIT_FAILED
    assert reason.startswith("job files_to_lake failed: StreamingQueryException: ")
    assert "\n" not in reason
    status = read_status(tmp_path)
    assert status["state"] == "failed" and "broken.parquet" in status["exception"]
    assert (tmp_path / "landing" / "broken.parquet").exists(), "a failed batch archives nothing"
    assert not log_ids(Path(config.checkpoint_location) / "commits")


def test_losing_the_lease_to_another_instance_fences_the_job_at_once(spark: Any, tmp_path: Path) -> None:
    """The watchdog finds the lease taken (another driver may write the checkpoint already) and
    fences: here, on a shared session, by stopping the query at once instead of exiting hard."""
    from hubflow.status import JobStatus, Lease, StatusFolder
    from hubflow.status.exit_codes import EXIT_LEASE_LOST
    from hubflow_jobs.runtime.watchdog import StopQueries, Watchdog

    config = _config(
        tmp_path,
        trigger={"availableNow": False, "processingTime": "1 second"},
        runtime={"lease_refresh_interval": "500 ms"},
    )
    write_json_landing_file(tmp_path / "landing", "a.json", 1, good=2, bad=0)
    folder = StatusFolder(config.status_dir)
    lease = Lease(folder, config.name, config.runtime.lease_timing())
    lease.acquire()
    lease_file = tmp_path / "status" / "files_to_lake" / "lease"
    stop, status = StopRequest(), JobStatus(folder, config.name)
    watchdog = Watchdog(folder, status, stop, config.runtime, StopQueries(spark), lease=lease).start()

    def take_over() -> None:
        wait_until(lambda: bool(log_ids(Path(config.checkpoint_location) / "commits")), 120, "a commit")
        document = json.loads(lease_file.read_text())
        lease_file.write_text(json.dumps({**document, "pid": 4242, "holder": "another-instance"}))

    thief = threading.Thread(target=take_over, daemon=True)
    thief.start()
    try:
        start = start_function("files_to_lake")
        code, reason = run_job(spark, config, start, stop, status=status, watchdog=watchdog)
    finally:
        watchdog.close()
    thief.join(5)

    assert code == EXIT_LEASE_LOST
    assert reason == f"job files_to_lake lost its lease: pid 4242 on host {socket.gethostname()} took it over"
    assert not spark.streams.active, "the query was stopped"
    lease.release()
    assert json.loads(lease_file.read_text())["holder"] == "another-instance", "the new lease is left alone"
