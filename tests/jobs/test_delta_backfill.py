"""Backfills of Delta-output jobs replace exactly their interval in the main table, in one
transaction, while the stream appends; conflicts are retried; reruns replace again; a backfill that
would double or lose rows is refused with the reason."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hubflow.applications import pipeline_reference
from hubflow.config import load_config
from hubflow.status.exit_codes import EXIT_OK
from hubflow_jobs.backfill_window import BackfillRefused
from hubflow_jobs.builtins.eventhubs_to_lake import EventHubsToLakeConfig
from hubflow_jobs.pipeline.job import start_function
from hubflow_jobs.runtime.runner import run_job
from hubflow_jobs.runtime.stop import StopRequest
from tests.support.lake import delta_version, spark_rows
from tests.support.processes import wait_until

from .helpers import (
    EmulatedHub,
    backfill_files,
    eventhubs_config,
    files_to_lake_config,
    lake_tables,
    landing_archive,
    landing_config,
    run_files_to_lake,
    write_config,
    write_json_landing_file,
)

pytestmark = pytest.mark.integration
start_eventhubs_to_lake = start_function("eventhubs_to_lake")
ENV_VAR = "HUBFLOW_TEST_BACKFILL_CONNECTION"
IDENTITY = {"partition": "value", "sequenceNumber": "value", "body": "value", "_ingested_at": "timestamp"}


def _whole_second(moment: datetime) -> datetime:
    return moment.replace(microsecond=0) + timedelta(seconds=1)


def _bronze(spark: Any, table: Path) -> dict[bytes, list[int]]:
    """Body -> the ``_ingested_at`` of each row holding it (one entry per row)."""
    rows: dict[bytes, list[int]] = {}
    for _partition, _seq, body, ingested in spark_rows(spark, table, IDENTITY):
        rows.setdefault(body, []).append(ingested)
    return rows


def _landed(spark: Any, table: Path) -> int:
    """Rows in the table so far (0 before its first commit).

    ``_delta_log/`` exists before its first commit file does (Delta creates the folder, then
    renames the commit into it), so the table is there once a commit file is.
    """
    if not any((table / "_delta_log").glob("[0-9]*.json")):
        return 0
    return len(spark_rows(spark, table, {"sequenceNumber": "value"}))


def backfill_eventhubs(spark: Any, config: EventHubsToLakeConfig, start: datetime, end: datetime) -> int:
    """The backfill of the built-in eventhubs_to_lake (a pipeline): the events it read."""
    from hubflow_jobs.pipeline.backfill import backfill_pipeline
    from hubflow_jobs.pipeline.binding import bind, load_function

    reference = pipeline_reference("eventhubs_to_lake") or ""
    binding = bind(load_function(reference), reference, list(config.sources))
    return backfill_pipeline(spark, config, binding, start, end)["read"]


def _conflicting_replace(monkeypatch: pytest.MonkeyPatch, gate: Path, attempts: list[int]) -> None:
    """Make the backfill's first write wait, mid-transaction, until the test lets it go on.

    The wrapped frame carries a UDF that runs while Delta writes the replacement's files, after the
    transaction read the table and before it commits: a commit the stream makes meanwhile is one
    the replacement did not see.
    """
    from pyspark.sql import functions as F

    import hubflow_jobs.pipeline.interval_writes as writes

    real = writes.replace_rows
    gate.mkdir()

    def wait_for_go(_: Any) -> bool:
        started, go = gate / "started", gate / "go"
        started.touch()
        deadline = time.time() + 300
        while not go.exists() and time.time() < deadline:
            time.sleep(0.1)
        return True

    def replace(frame: Any, path: str, *args: Any) -> int:
        # One task waits; local[2]'s other slot stays free for the stream's batch.
        waiting = frame.coalesce(1).where(F.udf(wait_for_go, "boolean", useArrow=False)(F.col("partition")))
        made = real(waiting, path, *args)
        attempts.append(made)
        return made

    monkeypatch.setattr(writes, "replace_rows", replace)


def test_event_hubs_backfill_replaces_its_interval_while_the_stream_appends(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, eventhub.connection_string)
    start = datetime.now(UTC).replace(microsecond=0)
    interval = eventhub.send_numbered(0, 40)
    end = _whole_second(datetime.now(UTC))
    time.sleep(max(0.0, (end - datetime.now(UTC)).total_seconds()) + 0.2)
    after = eventhub.send_numbered(100, 20)  # enqueued after the interval
    raw = eventhubs_config(
        tmp_path,
        eventhub,
        ENV_VAR,
        sink={"format": "delta"},
        trigger={"availableNow": False, "processingTime": "1 second"},
    )
    raw["trigger"] = {"processingTime": "1 second"}
    config = load_config(write_config(tmp_path / "job.yaml", raw), EventHubsToLakeConfig)
    table = Path(config.sinks["bronze"].output_path)
    stop = StopRequest()
    outcome: list[tuple[int, str]] = []
    stream = threading.Thread(
        target=lambda: outcome.append(run_job(spark, config, start_eventhubs_to_lake, stop)), daemon=True
    )
    stream.start()
    gate, attempts = tmp_path / "gate", []
    try:
        wait_until(lambda: _landed(spark, table) == 60, 240, "the first 60 events")
        streamed = _bronze(spark, table)
        _conflicting_replace(monkeypatch, gate, attempts)
        backfill = threading.Thread(target=lambda: backfill_eventhubs(spark, config, start, end), daemon=True)
        backfill.start()
        wait_until(lambda: (gate / "started").exists(), 240, "the backfill to be writing")
        version = delta_version(table)
        later = eventhub.send_numbered(200, 30)  # the stream appends these meanwhile
        wait_until(lambda: delta_version(table) > version, 240, "the stream's commit during the backfill")
        (gate / "go").touch()
        backfill.join(300)
        assert not backfill.is_alive()
    finally:
        if gate.is_dir():
            (gate / "go").touch()
        stop.request("test over")
        stream.join(120)
    assert outcome and outcome[0][0] == EXIT_OK, outcome
    assert attempts and attempts[0] >= 2, "the stream's commit conflicted and the replacement was retried"

    rows = _bronze(spark, table)
    assert set(rows) == interval | after | later
    assert all(len(found) == 1 for found in rows.values()), "every event once"
    assert all(rows[body] != streamed[body] for body in interval), "the interval's rows were replaced"
    assert all(rows[body] == streamed[body] for body in after), "rows outside the interval are untouched"

    # A rerun replaces the interval again, in one more commit.
    monkeypatch.undo()
    monkeypatch.setenv(ENV_VAR, eventhub.connection_string)
    version = delta_version(table)
    assert backfill_eventhubs(spark, config, start, end) == len(interval)
    assert delta_version(table) == version + 1
    again = _bronze(spark, table)
    assert Counter(len(v) for v in again.values()) == {1: len(interval | after | later)}

    # Events the stream has not read yet: it will land them itself, so the backfill is refused.
    unread_start = _whole_second(datetime.now(UTC))
    time.sleep(max(0.0, (unread_start - datetime.now(UTC)).total_seconds()) + 0.2)
    eventhub.send_numbered(300, 8)
    with pytest.raises(BackfillRefused, match=r"has not yet read partitions \['0', '1', '2', '3'\]"):
        backfill_eventhubs(spark, config, unread_start, unread_start + timedelta(hours=1))
    # A row the hub no longer returns would be deleted by the replacement: refused.
    from pyspark.sql import functions as F

    ghost = spark.read.format("delta").load(str(table)).limit(1)
    ghost = ghost.withColumn("sequenceNumber", F.col("sequenceNumber") + 100_000)
    ghost.write.format("delta").mode("append").save(str(table))
    with pytest.raises(BackfillRefused, match=r"holds 1 events of this interval that the hub no longer"):
        backfill_eventhubs(spark, config, start - timedelta(days=1), unread_start)
    assert delta_version(table) == version + 2, "the refused backfills changed nothing"


def test_file_backfill_replaces_the_intervals_rows_in_both_delta_tables(spark: Any, tmp_path: Path) -> None:
    pattern = "%Y/%m/%d/%H"
    hour = datetime(2026, 11, 22, 10, tzinfo=UTC)
    folder = tmp_path / "landing" / hour.strftime(pattern)
    folder.mkdir(parents=True)
    ids = write_json_landing_file(folder, "a.json", 0, good=4, bad=1)
    ids |= write_json_landing_file(folder, "b.json", 10, good=3, bad=0)
    other = tmp_path / "landing" / (hour + timedelta(hours=1)).strftime(pattern)
    other.mkdir(parents=True)
    next_ids = write_json_landing_file(other, "c.json", 20, good=2, bad=1)
    raw = landing_config(
        tmp_path, source={"interval_folder": pattern, "max_files_per_trigger": 1}, sink={"format": "delta"}
    )
    config = files_to_lake_config(write_config(tmp_path / "job.yaml", raw))
    output, quarantine = Path(lake_tables(config)[0]), Path(lake_tables(config)[1])
    assert run_files_to_lake(spark, config)[0] == EXIT_OK
    archived = {p.name for p in Path(landing_archive(config)).rglob("*.json")}
    assert archived, "the test needs files read back from the archive"
    columns = {"id": "value", "_source_file": "value", "_ingested_at": "timestamp"}
    streamed = spark_rows(spark, output, columns)

    counts = backfill_files(spark, config, hour, hour + timedelta(hours=1))
    assert counts == {"files": 2, "read": 8, "written": 7, "quarantined": 1}
    rows = spark_rows(spark, output, columns)
    assert sorted(r[0] for r in rows) == sorted(ids | next_ids), "every record once"
    assert {r[1] for r in rows} == {r[1] for r in streamed}, "rows keep their landing path"
    replaced = {r[0] for r in rows} - {r[0] for r in streamed if r in rows}
    assert replaced == ids, "exactly the interval's rows were replaced"
    assert len(spark_rows(spark, quarantine, {"raw_record": "value"})) == 2

    # A file whose records all turned bad: the rerun moves them from the output to the quarantine.
    (b_file,) = [*tmp_path.joinpath("archive").rglob("b.json"), *folder.glob("b.json")]
    b_file.write_text("not json 1\nnot json 2\n", encoding="utf-8")
    assert backfill_files(spark, config, hour, hour + timedelta(hours=1))["quarantined"] == 3
    assert sorted(r[0] for r in spark_rows(spark, output, {"id": "value"})) == sorted(
        {i for i in ids if i < 10} | next_ids
    )
    assert len(spark_rows(spark, quarantine, {"raw_record": "value"})) == 4

    # A landing file the job has not processed yet: the backfill is refused, nothing changes.
    write_json_landing_file(folder, "late.json", 50, good=2, bad=0)
    version = delta_version(output)
    with pytest.raises(BackfillRefused, match=r"has not processed 1 of the interval's landing files"):
        backfill_files(spark, config, hour, hour + timedelta(hours=1))
    assert delta_version(output) == version
