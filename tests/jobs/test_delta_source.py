"""Reading Delta tables incrementally: bronze_to_silver under both triggers, batch sizes bounded by
max_files_per_trigger, restarts that resume exactly, commits that remove rows (fail, or skipped
with skip_change_commits), compaction never read twice; config errors name the key."""

from __future__ import annotations

import json
import threading
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hubflow.config import ConfigError, load_config
from hubflow.status.exit_codes import EXIT_FAILED, EXIT_OK
from hubflow_jobs.builtins.bronze_to_silver import BronzeToSilverConfig
from hubflow_jobs.lake.delta_source import DeltaReadOptions
from hubflow_jobs.lake.maintenance import compact
from hubflow_jobs.pipeline.job import start_function
from hubflow_jobs.runtime.runner import run_job
from hubflow_jobs.runtime.stop import StopRequest
from tests.support.lake import delta_version, spark_rows
from tests.support.processes import wait_until

from .helpers import write_config

start_bronze_to_silver = start_function("bronze_to_silver")
NAME = "telemetry_silver"
FILE_ROWS = 10
BRONZE_SCHEMA = (
    "body BINARY, partition STRING, offset STRING, sequenceNumber BIGINT, enqueuedTime TIMESTAMP, "
    "publisher STRING, partitionKey STRING, properties MAP<STRING, STRING>, "
    "systemProperties MAP<STRING, STRING>, _ingested_at TIMESTAMP, ingest_date DATE"
)


def append_bronze(spark: Any, table: Path, first: int, files: int = 1, bad: int = 0) -> set[int]:
    """One bronze commit of ``files`` files of ``FILE_ROWS`` events each (partition "0", sequence
    numbers from ``first``; the last ``bad`` with bodies that are not JSON); returns the good ones."""
    now = datetime(2026, 11, 22, 10, tzinfo=UTC)
    count = files * FILE_ROWS
    rows, good = [], set()
    for seq in range(first, first + count):
        broken = seq >= first + count - bad
        body = b"not json" if broken else json.dumps({"device": f"d{seq % 3}", "reading": seq}).encode()
        if not broken:
            good.add(seq)
        enqueued = now + timedelta(seconds=seq)
        rows.append((body, "0", str(seq), seq, enqueued, None, None, {}, {}, now, date(2026, 11, 22)))
    frame = spark.createDataFrame(spark.sparkContext.parallelize(rows, files), BRONZE_SCHEMA)
    frame.write.format("delta").mode("append").partitionBy("ingest_date").save(str(table))
    return good


def silver_config(base: Path, **source: Any) -> dict[str, Any]:
    return {
        "name": NAME,
        "trigger": {"availableNow": True},
        "checkpoint_root": str(base / "checkpoints"),
        "status_root": str(base / "status"),
        "spark_conf": {"spark.sql.shuffle.partitions": 2},
        "runtime": {"heartbeat_interval": "1 second", "poll_interval": "200 ms"},
        "source": {"path": str(base / "bronze"), "max_files_per_trigger": 2, **source},
        "parse": {"body_schema": "device STRING, reading BIGINT", "required_fields": ["device"]},
        "sink": {"output_path": str(base / "silver"), "quarantine_path": str(base / "quarantine")},
    }


def _load(base: Path, raw: dict[str, Any]) -> BronzeToSilverConfig:
    return load_config(write_config(base / "silver.yaml", raw), BronzeToSilverConfig)


def _batches(base: Path, count: int) -> list[int]:
    """Rows read per micro-batch with rows, from the job's progress history, once it lists ``count``
    such batches (the listener appends each progress shortly after the batch, on Spark's bus)."""
    history = base / "status" / NAME / "progress_history.jsonl"

    def read() -> list[int]:
        lines = [json.loads(line) for line in history.read_text().splitlines() if line.strip()]
        return [entry["num_input_rows"] for entry in lines if entry["num_input_rows"]]

    try:
        wait_until(lambda: len(read()) >= count, 60, f"{count} batches in the progress history")
    except TimeoutError:
        pass  # the assertion on the returned list says what was there
    return read()


def _silver(spark: Any, base: Path) -> list[int]:
    return [r[0] for r in spark_rows(spark, base / "silver", {"sequenceNumber": "value"})]


@pytest.mark.integration
def test_silver_reads_bronze_in_bounded_batches_resumes_exactly_and_never_rereads_compaction(
    spark: Any, tmp_path: Path
) -> None:
    bronze = tmp_path / "bronze"
    good = append_bronze(spark, bronze, 0, files=5, bad=1)
    config = _load(tmp_path, silver_config(tmp_path))

    assert run_job(spark, config, start_bronze_to_silver, StopRequest())[0] == EXIT_OK
    # availableNow in several batches of at most two bronze files each.
    assert _batches(tmp_path, 3) == [2 * FILE_ROWS, 2 * FILE_ROWS, FILE_ROWS]
    assert _silver(spark, tmp_path) == sorted(good)
    quarantined = spark_rows(spark, tmp_path / "quarantine", {"sequenceNumber": "value", "reason": "value"})
    reason = "body is not a JSON object matching parse.body_schema"
    assert quarantined == [(5 * FILE_ROWS - 1, reason)]
    status = json.loads((tmp_path / "status" / NAME / "status.json").read_text())
    assert status["counts"] == {"read": 5 * FILE_ROWS, "written": 5 * FILE_ROWS - 1, "quarantined": 1}

    # Compaction rewrites bronze's files in a dataChange=false commit: the next run reads nothing.
    assert compact(spark, str(bronze), dry_run=False)["files_removed"] == 5
    more = append_bronze(spark, bronze, 100, files=2)
    assert run_job(spark, config, start_bronze_to_silver, StopRequest())[0] == EXIT_OK
    assert _batches(tmp_path, 4)[3:] == [2 * FILE_ROWS], "the restart read exactly the two new files"
    assert _silver(spark, tmp_path) == sorted(good | more), "every event once"


@pytest.mark.integration
def test_a_commit_removing_bronze_rows_fails_the_query_unless_change_commits_are_skipped(
    spark: Any, tmp_path: Path
) -> None:
    bronze = tmp_path / "bronze"
    good = append_bronze(spark, bronze, 0, files=2)
    strict = _load(tmp_path, silver_config(tmp_path))
    assert run_job(spark, strict, start_bronze_to_silver, StopRequest())[0] == EXIT_OK
    spark.sql(f"DELETE FROM delta.`{bronze}` WHERE sequenceNumber = 3")
    later = append_bronze(spark, bronze, 20)

    code, reason = run_job(spark, strict, start_bronze_to_silver, StopRequest())
    assert code == EXIT_FAILED
    assert "DELTA_SOURCE_TABLE_IGNORE_CHANGES" in reason and "skipChangeCommits" in reason

    skipping = _load(tmp_path, silver_config(tmp_path, skip_change_commits=True))
    assert run_job(spark, skipping, start_bronze_to_silver, StopRequest())[0] == EXIT_OK
    # The delete's commit (its rewritten file included) is skipped; the later commit is read.
    assert _silver(spark, tmp_path) == sorted(good | later)


@pytest.mark.integration
def test_silver_under_a_processing_time_trigger_picks_up_new_bronze_commits(
    spark: Any, tmp_path: Path
) -> None:
    bronze = tmp_path / "bronze"
    good = append_bronze(spark, bronze, 0)
    raw = silver_config(tmp_path)
    raw["trigger"] = {"processingTime": "1 second"}
    config = _load(tmp_path, raw)
    stop = StopRequest()
    outcome: list[tuple[int, str]] = []
    runner = threading.Thread(
        target=lambda: outcome.append(run_job(spark, config, start_bronze_to_silver, stop)), daemon=True
    )
    runner.start()
    try:
        first_commit = tmp_path / "silver" / "_delta_log" / f"{0:020d}.json"
        wait_until(first_commit.exists, 180, "the first silver commit")
        good |= append_bronze(spark, bronze, 10, files=2)
        wait_until(lambda: len(_silver(spark, tmp_path)) == len(good), 180, "the new commits in silver")
    finally:
        stop.request("test over")
        runner.join(120)
    assert outcome and outcome[0][0] == EXIT_OK, outcome
    assert _silver(spark, tmp_path) == sorted(good)
    assert delta_version(tmp_path / "silver") >= 1


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            {"starting_version": 3, "starting_timestamp": "2026-11-22"},
            "source.starting_timestamp: set starting_version or starting_timestamp, not both",
        ),
        ({"max_bytes_per_trigger": "lots"}, "source.max_bytes_per_trigger: 'lots' is not a size"),
        ({"starting_timestamp": "yesterday"}, "source.starting_timestamp: 'yesterday' is not an ISO-8601"),
        ({"max_files_per_trigger": 0}, "source.max_files_per_trigger: must be > 0"),
        ({"skip_change_commit": True}, "source.skip_change_commit: unknown key"),
    ],
)
def test_delta_source_mistakes_name_the_key(tmp_path: Path, source: dict, expected: str) -> None:
    (tmp_path / "bronze" / "_delta_log").mkdir(parents=True)
    with pytest.raises(ConfigError, match=expected.replace(".", r"\.").replace("(", r"\(")):
        _load(tmp_path, silver_config(tmp_path, **source))


def test_a_source_that_is_not_a_delta_table_is_named(tmp_path: Path) -> None:
    (tmp_path / "bronze").mkdir()
    with pytest.raises(ConfigError, match=r"source\.path: .*bronze is not a Delta table \(no _delta_log/\)"):
        _load(tmp_path, silver_config(tmp_path))


def test_read_options_become_delta_options() -> None:
    options = DeltaReadOptions(
        max_files_per_trigger=5,
        max_bytes_per_trigger="64 MB",
        starting_timestamp="2026-11-22T10:00:00+01:00",
        skip_change_commits=True,
    ).delta_options()
    assert options == {
        "maxFilesPerTrigger": "5",
        "maxBytesPerTrigger": str(64 * 1024**2),
        "startingTimestamp": "2026-11-22 09:00:00.000000",
        "skipChangeCommits": "true",
    }
    assert DeltaReadOptions(starting_version="latest").delta_options()["startingVersion"] == "latest"
