"""The checkpoint inspector's verdicts on checkpoints written by real Spark queries, then damaged or aged."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem

from hubflow.checkpoints.inspector import Verdict, inspect_checkpoint
from tests.plugins.file_streams import FileStream, age_files

pytestmark = pytest.mark.integration

STALLED_AFTER = timedelta(minutes=10)
TWO_HOURS = 2 * 3600


@pytest.fixture(scope="module")
def template(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> FileStream:
    """A file-source query that has committed three batches (2, 3 and 4 files)."""
    stream = FileStream(spark, tmp_path_factory.mktemp("inspector") / "stream")
    for files in (2, 3, 4):
        stream.batches.append(stream.land(files))
        stream.run()
    return stream


@pytest.fixture
def checkpoint(template: FileStream, tmp_path: Path) -> Path:
    """A private copy of the template checkpoint (modification times kept) that a test may damage."""
    copy = tmp_path / "checkpoint"
    shutil.copytree(template.checkpoint, copy)
    return copy


def inspect(path: Path, **kwargs: Any):
    kwargs.setdefault("stalled_after", STALLED_AFTER)
    return inspect_checkpoint(str(path), **kwargs)


def test_just_committed_checkpoint_is_healthy_with_its_details(
    template: FileStream, checkpoint: Path
) -> None:
    report = inspect(checkpoint)

    assert report.verdict == Verdict.HEALTHY, report.reason
    assert report.ok
    assert report.query_id == template.query_id
    assert (report.latest_offsets_batch_id, report.latest_commit_batch_id) == (2, 2)
    assert report.offsets_log_version == 1
    assert [
        (s.source, json.loads(s.end_offset), json.loads(s.committed_end_offset)) for s in report.sources
    ] == [("0", {"logOffset": 2}, {"logOffset": 2})]
    [log] = report.file_source_logs
    assert (log.source, log.latest_log_offset, log.files_in_latest_entry, log.committed_log_offset) == (
        "0",
        2,
        4,
        2,
    )
    assert report.state_operators == []
    now = datetime.now(UTC)
    for moment in (report.latest_offsets_time, report.latest_commit_time, report.latest_batch_timestamp):
        assert now - timedelta(minutes=5) < moment <= now
    assert report.latest_commit_time >= report.latest_offsets_time
    as_json = json.loads(json.dumps(report.to_dict()))
    assert as_json["verdict"] == "healthy"
    assert as_json["sources"][0]["end_offset"] == '{"logOffset":2}'


def test_planned_but_uncommitted_recent_batch_is_in_flight(checkpoint: Path) -> None:
    (checkpoint / "commits" / "2").unlink()

    report = inspect(checkpoint)

    assert report.verdict == Verdict.BATCH_IN_FLIGHT, report.reason
    assert (report.latest_offsets_batch_id, report.latest_commit_batch_id) == (2, 1)
    assert json.loads(report.sources[0].end_offset) == {"logOffset": 2}
    assert json.loads(report.sources[0].committed_end_offset) == {"logOffset": 1}
    assert "Batch 2" in report.reason


def test_uncommitted_batch_older_than_allowed_is_a_failed_batch(checkpoint: Path) -> None:
    (checkpoint / "commits" / "2").unlink()
    age_files(checkpoint, TWO_HOURS)

    report = inspect(checkpoint)

    assert report.verdict == Verdict.FAILED_BATCH, report.reason
    assert not report.ok
    assert "Batch 2" in report.reason and "never committed" in report.reason
    # A longer allowance for slow batches turns the same checkpoint back into "in flight".
    assert inspect(checkpoint, failed_after=timedelta(hours=3)).verdict == Verdict.BATCH_IN_FLIGHT


def test_no_commit_for_longer_than_allowed_is_stalled(checkpoint: Path) -> None:
    age_files(checkpoint, TWO_HOURS)

    report = inspect(checkpoint)

    assert report.verdict == Verdict.STALLED, report.reason
    assert "No batch committed for 2h" in report.reason
    assert inspect(checkpoint, stalled_after=timedelta(hours=3)).verdict == Verdict.HEALTHY


def test_now_is_the_reference_time(checkpoint: Path) -> None:
    later = datetime.now(UTC) + timedelta(hours=1)
    assert inspect(checkpoint, now=later).verdict == Verdict.STALLED


def _rewrite(path: Path, change: Callable[[str], str]) -> None:
    path.write_text(change(path.read_text()))


CORRUPTIONS: dict[str, tuple[Callable[[Path], None], str]] = {
    "garbage offsets file": (
        lambda c: (c / "offsets" / "2").write_bytes(b"\x00\xff\xfe garbage"),
        "offsets/2",
    ),
    "empty offsets file": (lambda c: (c / "offsets" / "2").write_bytes(b""), "offsets/2"),
    "half-written offsets file": (
        lambda c: _rewrite(c / "offsets" / "2", lambda t: t[: len(t) // 2]),
        "offsets/2",
    ),
    "source offset that is not JSON": (
        lambda c: _rewrite(c / "offsets" / "2", lambda t: t.replace('{"logOffset":2}', '{"logOffset":')),
        "source 0",
    ),
    "garbage commit file": (lambda c: (c / "commits" / "2").write_text("v1\n{nextBatch"), "commits/2"),
    "unknown log version": (lambda c: _rewrite(c / "commits" / "2", lambda t: t.replace("v1", "v9")), "v9"),
    "garbage metadata": (lambda c: (c / "metadata").write_text("{"), "metadata"),
    "gap in offsets": (lambda c: (c / "offsets" / "1").unlink(), "gap"),
    "gap in commits": (lambda c: (c / "commits" / "1").unlink(), "gap"),
    "commit without offsets": (
        lambda c: shutil.copy(c / "commits" / "2", c / "commits" / "3"),
        "Commits run ahead of offsets",
    ),
    "file source log behind offsets": (lambda c: (c / "sources" / "0" / "2").unlink(), "log offset 2"),
}


@pytest.mark.parametrize("damage", list(CORRUPTIONS))
def test_damaged_checkpoint_is_corrupt_with_the_reason(checkpoint: Path, damage: str) -> None:
    change, expected_words = CORRUPTIONS[damage]
    change(checkpoint)

    report = inspect(checkpoint)

    assert report.verdict == Verdict.CORRUPT, report.reason
    assert expected_words in report.reason
    assert "new checkpoint" in report.reason  # tells on-call what to do


def test_missing_checkpoint(tmp_path: Path) -> None:
    absent = inspect(tmp_path / "never-ran")
    assert absent.verdict == Verdict.MISSING
    assert "does not exist" in absent.reason

    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metadata").write_text('{"id":"3f1c1d2e-0000-4000-8000-000000000000"}')
    started = inspect(tmp_path / "empty")
    assert started.verdict == Verdict.MISSING
    assert started.query_id == "3f1c1d2e-0000-4000-8000-000000000000"
    assert "no offsets log" in started.reason


class CountingFileSystem(LocalFileSystem):
    """The real local filesystem, recording every file it opens."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.opened: list[str] = []

    def _open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any):
        self.opened.append(path)
        return super()._open(path, mode, *args, **kwargs)


def test_cost_does_not_grow_with_the_number_of_batches(checkpoint: Path, tmp_path: Path) -> None:
    few = CountingFileSystem(skip_instance_cache=True)
    assert inspect(checkpoint, fs=few).verdict == Verdict.HEALTHY

    many_batches = tmp_path / "many"
    shutil.copytree(checkpoint, many_batches)
    for batch in range(3, 300):  # batches without new files keep the same file source log offset
        shutil.copy(many_batches / "offsets" / "2", many_batches / "offsets" / str(batch))
        shutil.copy(many_batches / "commits" / "2", many_batches / "commits" / str(batch))
    many = CountingFileSystem(skip_instance_cache=True)
    report = inspect(many_batches, fs=many)

    assert report.verdict == Verdict.HEALTHY, report.reason
    assert report.latest_commit_batch_id == 299
    assert len(many.opened) == len(few.opened) == 4, many.opened  # metadata, offsets, commit, source log
    assert not any(p.endswith(("/offsets/3", "/offsets/100", "/commits/150")) for p in many.opened)


def test_offsets_log_v2(spark: Any, tmp_path: Path) -> None:
    stream = FileStream(spark, tmp_path / "v2")
    spark.conf.set("spark.sql.streaming.offsetLog.formatVersion", "2")
    try:
        stream.land_and_run(batches=2, files_per_batch=2)
    finally:
        spark.conf.unset("spark.sql.streaming.offsetLog.formatVersion")
    assert (stream.checkpoint / "offsets" / "1").read_text().startswith("v2\n")

    report = inspect(stream.checkpoint)

    assert report.verdict == Verdict.HEALTHY, report.reason
    assert report.offsets_log_version == 2
    assert [(s.source, json.loads(s.end_offset)) for s in report.sources] == [("0", {"logOffset": 1})]
    assert report.file_source_logs[0].files_in_latest_entry == 2


def test_state_operator_metadata(spark: Any, tmp_path: Path) -> None:
    stream = FileStream(spark, tmp_path / "stateful")
    stream.land(3)
    query = (
        spark.readStream.format("json")
        .schema("id long, body string")
        .option("recursiveFileLookup", "true")
        .load(str(stream.landing))
        .groupBy()
        .count()
        .writeStream.format("memory")
        .queryName("inspector_state_test")
        .outputMode("complete")
        .option("checkpointLocation", str(stream.checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert spark.table("inspector_state_test").collect()[0][0] == 9

    report = inspect(stream.checkpoint)

    assert report.verdict == Verdict.HEALTHY, report.reason
    assert [(op.operator_id, op.operator_name) for op in report.state_operators] == [(0, "stateStoreSave")]
    assert report.state_operators[0].stores == [{"store_name": "default", "num_partitions": 2}]


def test_command_line_prints_the_report_and_exits_non_zero_when_not_ok(
    checkpoint: Path, tmp_path: Path
) -> None:
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / "plugins"), str(repo / "jobs")])}
    command = [sys.executable, "-m", "hubflow.checkpoints.inspector"]

    good = subprocess.run([*command, str(checkpoint)], env=env, capture_output=True, text=True, timeout=60)
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["verdict"] == "healthy"

    bad = subprocess.run(
        [*command, str(tmp_path / "nowhere")], env=env, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["verdict"] == "missing"


def test_first_batch_never_committed(checkpoint: Path) -> None:
    for name in ("commits/0", "commits/1", "commits/2", "offsets/1", "offsets/2"):
        (checkpoint / name).unlink()

    report = inspect(checkpoint)

    assert report.verdict == Verdict.BATCH_IN_FLIGHT, report.reason
    assert (report.latest_offsets_batch_id, report.latest_commit_batch_id) == (0, None)
    assert report.sources[0].committed_end_offset is None
    age_files(checkpoint, TWO_HOURS)
    assert inspect(checkpoint).verdict == Verdict.FAILED_BATCH


def test_compacted_file_source_log_summary(spark: Any, tmp_path: Path) -> None:
    stream = FileStream(spark, tmp_path / "compacted")
    spark.conf.set("spark.sql.streaming.fileSource.log.compactInterval", "3")
    try:
        stream.land_and_run(batches=3, files_per_batch=2)
    finally:
        spark.conf.unset("spark.sql.streaming.fileSource.log.compactInterval")

    [log] = inspect(stream.checkpoint).file_source_logs

    assert (log.latest_log_offset, log.latest_file, log.files_in_latest_entry) == (2, "2.compact", 2)


def test_old_batches_purged_by_spark_retention_are_fine(checkpoint: Path) -> None:
    for name in ("offsets/0", "commits/0"):
        (checkpoint / name).unlink()
    assert inspect(checkpoint).verdict == Verdict.HEALTHY

    # Only the newest offsets file kept (minBatchesToRetain=1) while batch 2 runs.
    for name in ("offsets/1", "commits/2"):
        (checkpoint / name).unlink()
    report = inspect(checkpoint)
    assert report.verdict == Verdict.BATCH_IN_FLIGHT, report.reason
    assert report.sources[0].committed_end_offset is None


def test_other_sources_metadata_is_not_mistaken_for_a_file_source_log(checkpoint: Path) -> None:
    rate_source = checkpoint / "sources" / "1"
    rate_source.mkdir()
    (rate_source / "0").write_text("v1\n1795311195943")  # what the rate source keeps: its start time

    report = inspect(checkpoint)

    assert report.verdict == Verdict.HEALTHY, report.reason
    assert [log.source for log in report.file_source_logs] == ["0"]


def test_file_source_log_broken_after_its_first_entry_is_corrupt(checkpoint: Path) -> None:
    with (checkpoint / "sources" / "0" / "2").open("a") as log:
        log.write('\n{"path": "file:/half')

    report = inspect(checkpoint)

    assert report.verdict == Verdict.CORRUPT
    assert "sources/0/2" in report.reason


def test_works_on_any_fsspec_filesystem(checkpoint: Path) -> None:
    """The same checkpoint copied to fsspec's in-memory filesystem (an object-store-like backend)."""
    memory = fsspec.filesystem("memory")
    target = f"/inspector-{os.getpid()}/checkpoint"
    try:
        memory.put(str(checkpoint), target, recursive=True)
        report = inspect_checkpoint(f"memory://{target}", stalled_after=STALLED_AFTER)
        assert report.verdict == Verdict.HEALTHY, report.reason
        assert (report.latest_offsets_batch_id, report.latest_commit_batch_id) == (2, 2)
        assert report.file_source_logs[0].files_in_latest_entry == 4
        assert report.latest_commit_time is not None

        memory.rm(f"{target}/commits/2")
        assert inspect_checkpoint(f"memory://{target}", stalled_after=STALLED_AFTER).verdict == (
            Verdict.BATCH_IN_FLIGHT
        )
    finally:
        memory.rm(f"/inspector-{os.getpid()}", recursive=True)
