"""The inspector and the status page read a Delta table's version and the batch its log records for
the query (delta-rs, no Spark), put it beside Spark's last commit and explain a difference."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from hubflow.checkpoints.delta_log import compare
from hubflow.checkpoints.inspector import inspect_checkpoint, main
from hubflow.progress.history import ProgressSamples
from hubflow.progress.job_snapshots import job_snapshot
from hubflow.registry import load_registry

NAME = "orders_delta"


@pytest.mark.parametrize(
    ("version", "query", "table_batch", "committed", "agreement", "words"),
    [
        (None, None, None, None, "no-table", "No Delta table"),
        (4, "q", 4, 4, "in-step", "In step: batch 4"),
        (5, "q", 5, 4, "table-ahead-by-one", "the Delta sink skips it"),
        (0, "q", 0, None, "table-ahead-by-one", "nothing is written twice"),
        (9, "q", 9, 4, "checkpoint-behind", "would skip batches 5-9"),
        (3, "q", 2, 4, "behind", "batches 3-4 are not in the table"),
        (3, "q", None, 4, "behind", "records none of them"),
        (3, None, None, None, "no-checkpoint", "no query id"),
    ],
)
def test_each_difference_gets_its_meaning(
    version: Any, query: Any, table_batch: Any, committed: Any, agreement: str, words: str
) -> None:
    found = compare("/lake/t", version, query, table_batch, committed)
    assert found.agreement == agreement
    assert words in found.explanation


def _stream_batches(spark: Any, base: Path, files: int) -> tuple[Path, Path]:
    """A Delta sink query over ``files`` JSON files, one per batch; returns (checkpoint, table)."""
    landing = base / "landing"
    landing.mkdir(exist_ok=True)
    for number in range(files):
        (landing / f"f{number}.json").write_text(json.dumps({"id": number}) + "\n")
    checkpoint, table = base / "checkpoints" / NAME, base / "lake" / NAME
    query = (
        spark.readStream.schema("id BIGINT")
        .option("maxFilesPerTrigger", 1)
        .json(str(landing))
        .writeStream.format("delta")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(table))
    )
    assert query.awaitTermination(300)
    assert query.exception() is None
    return checkpoint, table


@pytest.mark.integration
def test_inspector_and_status_page_show_the_table_beside_spark(spark: Any, tmp_path: Path, capsys) -> None:
    checkpoint, table = _stream_batches(spark, tmp_path, files=3)
    report = inspect_checkpoint(str(checkpoint), stalled_after=_hour(), delta_tables=[str(table)])
    (sink,) = report.delta_sinks
    found = (sink.version, sink.table_batch, sink.spark_committed_batch, sink.agreement)
    assert found == (2, 2, 2, "in-step")
    assert sink.query_id == json.loads((checkpoint / "metadata").read_text())["id"]

    config = tmp_path / "orders.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": NAME,
                "trigger": {"availableNow": True},
                "checkpoint_root": str(tmp_path / "checkpoints"),
                "status_root": str(tmp_path / "status"),
                "source": {
                    "path": str(tmp_path / "landing"),
                    "archive_dir": str(tmp_path / "archive"),
                    "format": "json",
                    "schema": "id BIGINT",
                },
                "sink": {"output_path": str(table), "quarantine_path": str(tmp_path / "none")},
            }
        )
    )
    registry = tmp_path / "registry.yaml"
    entry = {"name": NAME, "application": "files_to_lake", "config": str(config), "mode": "scheduled"}
    registry.write_text(yaml.safe_dump({"jobs": [{**entry, "schedule": "@hourly"}]}))
    (job,) = load_registry(registry).jobs
    snapshot = job_snapshot(job, ProgressSamples())
    assert [(t["table"], t["agreement"]) for t in snapshot["delta_tables"]] == [
        (str(table), "in-step"),
        (str(tmp_path / "none"), "no-table"),
    ]
    assert snapshot["error"] is None

    # The driver died after batch 2's Delta commit, before Spark's commit file: explained, not alarming.
    (checkpoint / "commits" / "2").unlink()
    assert main([str(checkpoint), "--delta-table", str(table)]) == 0
    printed = json.loads(capsys.readouterr().out)["delta_sinks"][0]
    assert printed["agreement"] == "table-ahead-by-one" and "skips it" in printed["explanation"]

    # A checkpoint older than the table (restored from a backup): the sink would skip new input.
    for batch in (1, 2):
        for log in ("offsets", "commits"):
            (checkpoint / log / str(batch)).unlink(missing_ok=True)
    again = job_snapshot(job, ProgressSamples())["delta_tables"][0]
    assert again["agreement"] == "checkpoint-behind", again
    assert "would skip batches 1-2" in again["explanation"]


def _hour() -> timedelta:
    return timedelta(hours=1)


def test_commits_back_to_a_moment_reads_history_in_growing_steps_and_stops_there(tmp_path: Path) -> None:
    """``commits_back_to``: the commits up to a version made since a moment, however deep in the
    history (more commits than its first step reads), each with its commit tag."""
    import time

    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from hubflow.checkpoints.delta_log import commits_back_to

    table = str(tmp_path / "t")
    for n in range(40):
        write_deltalake(table, pa.table({"n": [n]}), mode="append", commit_properties=_tag(f"try-{n}"))
        time.sleep(0.003)  # distinct commit timestamps (milliseconds)
    stamps = {int(c["version"]): int(c["timestamp"]) for c in DeltaTable(table).history()}
    found = commits_back_to(table, 35, stamps[5])
    assert found == [(v, f"try-{v}") for v in range(35, 4, -1)]
    assert commits_back_to(table, 39, stamps[39] + 1) == [], "nothing that recent"
    assert commits_back_to(str(tmp_path / "none"), 3, 0) == [], "no table"


def _tag(text: str) -> Any:
    from deltalake import CommitProperties

    return CommitProperties(custom_metadata={"userMetadata": text})
