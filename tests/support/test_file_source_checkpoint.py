"""The synthetic long-running checkpoint (tests/support/file_source_checkpoint.py) is one Spark resumes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tests.support.file_source_checkpoint import write_file_source_checkpoint

pytestmark = pytest.mark.integration


def test_spark_resumes_a_synthetic_checkpoint_and_reads_only_the_new_file(spark: Any, tmp_path: Path) -> None:
    landing, checkpoint = tmp_path / "landing", tmp_path / "checkpoint"
    landing.mkdir()
    write_file_source_checkpoint(fsspec.filesystem("file"), str(checkpoint), 25, f"file://{landing}")
    for batch_id in range(25):  # the files the checkpoint says were taken
        (landing / f"batch-{batch_id:06d}-0.json").write_text(json.dumps({"id": batch_id}) + "\n")
    (landing / "new.json").write_text(json.dumps({"id": 1000}) + "\n")
    assert sorted(p.name for p in (checkpoint / "sources" / "0").iterdir()) == [
        "19.compact",
        *map(str, range(20, 25)),
    ]

    batches: list[tuple[int, list[int]]] = []
    query = (
        spark.readStream.format("json")
        .schema("id long")
        .load(str(landing))
        .writeStream.foreachBatch(
            lambda frame, batch_id: batches.append((batch_id, [r.id for r in frame.collect()]))
        )
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()

    assert batches == [(25, [1000])]
    assert (checkpoint / "commits" / "25").exists()
    assert (checkpoint / "sources" / "0" / "25").read_text().count('"batchId":25') == 1
