"""Archiving the files of committed batches of a real Spark file stream: once, never lost, never early."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import fsspec
import pytest

from hubflow.operations.archive import TEMP_SUFFIX, ArchiveError, archive_processed_files, purge_archive
from tests.plugins.file_streams import FileStream, age_files, relative_files

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]


def archive(stream: FileStream, **kwargs):
    kwargs.setdefault("log", lambda line: None)
    return archive_processed_files(str(stream.checkpoint), str(stream.landing), str(stream.archive), **kwargs)


def contents(root: Path) -> dict[str, bytes]:
    return {name: (root / name).read_bytes() for name in relative_files(root)}


def names(files: list[Path], root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in files)


def test_committed_files_move_to_the_same_relative_path_once(file_stream: FileStream) -> None:
    file_stream.land_and_run(batches=3, files_per_batch=4)
    landed = contents(file_stream.landing)
    lines: list[str] = []

    result = archive(file_stream, log=lines.append, progress_every=5, max_workers=3)

    assert contents(file_stream.archive) == landed  # same relative paths, same bytes, no temp files
    assert relative_files(file_stream.landing) == []
    assert result.moved == sorted(landed)
    assert (result.committed_batch_id, result.committed_files) == (2, 12)
    assert any("région=eu" in name and " " in name for name in result.moved)  # URI-decoded log paths
    assert [line for line in lines if line.startswith("Archived ")] == [
        "Archived 5/12 file(s)...",
        "Archived 10/12 file(s)...",
    ]
    assert "moved 12 file(s)" in lines[-1]
    # Spark read every event exactly once before the files moved.
    assert file_stream.output_ids() == list(range(36))

    assert json.loads(json.dumps(result.to_dict()))["moved"] == result.moved
    again = archive(file_stream)
    assert (again.moved, again.landing_copies_removed, again.already_archived) == ([], [], 12)
    assert contents(file_stream.archive) == landed


def test_files_of_an_uncommitted_batch_stay_until_it_commits(file_stream: FileStream) -> None:
    batches = file_stream.land_and_run(batches=3, files_per_batch=3)
    assert file_stream.uncommit_last_batch() == 2
    not_yet_read = file_stream.land(2)

    result = archive(file_stream)

    landing = file_stream.landing
    assert result.moved == names(batches[0] + batches[1], landing)
    assert relative_files(landing) == names(batches[2] + not_yet_read, landing)
    assert relative_files(file_stream.archive) == names(batches[0] + batches[1], landing)

    # The restarted query re-runs batch 2 from the files still in landing, then takes the new files.
    file_stream.run()
    assert file_stream.output_ids() == list(range(33))
    result = archive(file_stream)
    assert result.moved == names(batches[2] + not_yet_read, landing)
    assert relative_files(landing) == []


def test_paths_outside_the_landing_root_are_refused(file_stream: FileStream) -> None:
    data = file_stream.base / "data"
    inside = file_stream.land(2, root=data / "landing")
    outside = file_stream.land(2, root=data / "other")
    file_stream.run(source=data)  # the query reads more than the landing root
    secret = data / "secret.json"
    secret.write_text('{"id": -1}\n')
    log_file = file_stream.checkpoint / "sources" / "0" / "0"
    escapes = [
        "file://" + quote(f"{data}/landing/../secret.json"),
        "abfss://lake@account.dfs.core.windows.net" + quote(f"{data}/landing/x.json"),
    ]
    with log_file.open("a") as log:
        for path in escapes:
            log.write("\n" + json.dumps({"path": path, "timestamp": 0, "batchId": 0}))

    result = archive_processed_files(
        str(file_stream.checkpoint), str(data / "landing"), str(file_stream.archive), log=lambda line: None
    )

    assert result.moved == names(inside, data / "landing")
    assert all(path.exists() for path in [*outside, secret])
    assert len(result.refused) == 4
    reasons = sorted(result.refused.values())
    assert sum("outside the landing root" in r for r in reasons) == 2
    assert any("'..'" in r for r in reasons)
    assert any("another filesystem" in r for r in reasons)
    assert relative_files(file_stream.archive) == names(inside, data / "landing")


# Four workers move files one at a time each, so the 5th copy (or rename) starts only after some worker
# finished a whole file: dying there is always "mid-way" (some files moved, some not).
@pytest.mark.parametrize(("step", "after"), [("during-copy", 6), ("before-rename", 6), ("before-delete", 5)])
def test_run_killed_mid_way_then_rerun_loses_nothing_and_archives_once(
    file_stream: FileStream, step: str, after: int
) -> None:
    file_stream.land_and_run(batches=2, files_per_batch=10)
    landed = contents(file_stream.landing)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(REPO_ROOT / p) for p in ("control", "plugins", "jobs", "")),
    }
    command = [sys.executable, "-m", "tests.plugins.archive_until_killed"]
    roots = [str(file_stream.checkpoint), str(file_stream.landing), str(file_stream.archive)]

    killed = subprocess.run(
        [*command, *roots, step, str(after)], cwd=REPO_ROOT, env=env, timeout=120, capture_output=True
    )

    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    left = relative_files(file_stream.landing)
    assert 0 < len(left) < len(landed)  # killed mid-way
    in_archive = relative_files(file_stream.archive)
    if step == "during-copy":
        assert any(name.endswith(TEMP_SUFFIX) for name in in_archive)  # a half-written copy
    if step == "before-delete":
        assert set(left) & set(in_archive)  # a file in both places

    result = archive(file_stream)

    assert contents(file_stream.archive) == landed  # every file exactly once, complete, no temp copies
    assert relative_files(file_stream.landing) == []
    assert len(result.moved) + len(result.landing_copies_removed) == len(left)
    assert len(result.moved) + len(result.landing_copies_removed) + result.already_archived == len(landed)
    if step == "before-delete":
        assert result.landing_copies_removed


def test_runs_archiving_the_same_files_at_once_leave_each_file_in_the_archive_once_whole(
    file_stream: FileStream,
) -> None:
    """Two DAGs (or a retry beside a late run) may archive the same files at the same moment: each
    run copies to a name of its own, so none renames a copy another is still writing."""
    file_stream.land_and_run(batches=2, files_per_batch=30)
    landed = contents(file_stream.landing)
    start = threading.Barrier(4)

    def one_run() -> Any:
        start.wait()
        return archive(file_stream, max_workers=4)

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: one_run(), range(4)))

    assert contents(file_stream.archive) == landed  # every file once, whole, no temporary copies left
    assert relative_files(file_stream.landing) == []
    assert all(not result.errors and not result.conflicts for result in results)
    moved = [name for result in results for name in result.moved]
    assert len(moved) == len(set(moved)) and set(moved) <= set(landed), "each file moved by one run"


def test_dry_run_moves_nothing(file_stream: FileStream) -> None:
    [batch] = file_stream.land_and_run(batches=1, files_per_batch=3)
    landed = contents(file_stream.landing)
    lines: list[str] = []

    result = archive(file_stream, dry_run=True, log=lines.append)

    assert result.dry_run
    assert result.moved == names(batch, file_stream.landing)
    assert contents(file_stream.landing) == landed
    assert not file_stream.archive.exists()
    assert lines[-1].startswith("Dry run: would move 3 file(s)")


def test_conflicting_archive_copy_is_left_alone(file_stream: FileStream) -> None:
    [batch] = file_stream.land_and_run(batches=1, files_per_batch=3)
    different, same = (file_stream.archive / name for name in names(batch[:2], file_stream.landing))
    different.parent.mkdir(parents=True)
    different.write_text("another file with the same name\n")
    same.write_bytes(batch[1].read_bytes())

    result = archive(file_stream)

    assert result.conflicts == [str(different.relative_to(file_stream.archive))]
    assert batch[0].exists() and different.read_text() == "another file with the same name\n"
    assert result.landing_copies_removed == [str(same.relative_to(file_stream.archive))]
    assert not batch[1].exists()
    assert result.moved == names(batch[2:], file_stream.landing)


def test_an_archive_copy_of_the_same_size_but_other_bytes_is_a_conflict(file_stream: FileStream) -> None:
    """ "Already archived" is decided by content: a same-sized different file is never taken for it."""
    [batch] = file_stream.land_and_run(batches=1, files_per_batch=1)
    [name] = names(batch, file_stream.landing)
    impostor = file_stream.archive / name
    impostor.parent.mkdir(parents=True)
    impostor.write_bytes(bytes(reversed(batch[0].read_bytes())))

    result = archive(file_stream)

    assert result.conflicts == [name] and result.landing_copies_removed == []
    assert batch[0].exists()


def test_overlapping_roots_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ArchiveError, match="overlap"):
        archive_processed_files(
            str(tmp_path / "ckpt"), str(tmp_path / "landing"), str(tmp_path / "landing" / "archive")
        )


def test_checkpoint_without_a_file_source_is_refused(file_stream: FileStream) -> None:
    file_stream.land_and_run(batches=1, files_per_batch=1)
    offsets = file_stream.checkpoint / "offsets" / "0"
    offsets.write_text(offsets.read_text().replace('{"logOffset":0}', '{"ingress":{"0":42}}'))

    with pytest.raises(ArchiveError, match="no file source"):
        archive(file_stream)
    assert len(relative_files(file_stream.landing)) == 1


def test_purge_deletes_archived_files_older_than_the_retention(file_stream: FileStream) -> None:
    old = file_stream.land(2, folder="région=eu/2026/10/01")
    file_stream.run()
    new = file_stream.land(2)
    file_stream.run()
    archive(file_stream)
    age_files(file_stream.archive / "région=eu" / "2026" / "10", 10 * 24 * 3600)

    old_bytes = sum((file_stream.archive / name).stat().st_size for name in names(old, file_stream.landing))

    planned = purge_archive(str(file_stream.archive), timedelta(days=7), dry_run=True, log=lambda line: None)
    assert planned.deleted == names(old, file_stream.landing)
    assert len(relative_files(file_stream.archive)) == 4

    purged = purge_archive(str(file_stream.archive), timedelta(days=7), log=lambda line: None)

    assert purged.deleted == names(old, file_stream.landing)
    assert purged.bytes_deleted == old_bytes
    assert relative_files(file_stream.archive) == names(new, file_stream.landing)
    assert not (file_stream.archive / "région=eu" / "2026" / "10").exists()  # emptied folders removed
    assert file_stream.archive.is_dir()


def test_compacted_file_source_log(file_stream: FileStream, spark: Any) -> None:
    """Log offsets 2 and 5 are compact files; batch 5 is left uncommitted and Spark's cleanup of old deltas
    is imitated, so the files of committed batches 3 and 4 are only listed in the uncommitted 5.compact."""
    spark.conf.set("spark.sql.streaming.fileSource.log.compactInterval", "3")
    try:
        batches = file_stream.land_and_run(batches=6, files_per_batch=2)
    finally:
        spark.conf.unset("spark.sql.streaming.fileSource.log.compactInterval")
    log_dir = file_stream.checkpoint / "sources" / "0"
    assert {"2.compact", "5.compact"} <= {p.name for p in log_dir.iterdir()}
    assert file_stream.uncommit_last_batch() == 5
    committed = [path for batch in batches[:5] for path in batch]

    # First with 2.compact kept but the deltas after it deleted, then with every older file deleted.
    for deleted in (("0", "1", "3", "4"), ("2.compact",)):
        for name in deleted:
            (log_dir / name).unlink(missing_ok=True)
        result = archive(file_stream, dry_run=True)
        assert result.moved == names(committed, file_stream.landing)

    result = archive(file_stream)

    assert result.moved == names(committed, file_stream.landing)
    assert relative_files(file_stream.landing) == names(batches[5], file_stream.landing)


@pytest.mark.slow
def test_archive_killed_from_outside_at_a_random_moment_then_rerun(file_stream: FileStream) -> None:
    """The plain library in a child process, SIGKILLed by the parent once it reports 100 files done."""
    file_stream.land_and_run(batches=1, files_per_batch=600)
    landed = contents(file_stream.landing)
    pythonpath = os.pathsep.join(str(REPO_ROOT / p) for p in ("control", "plugins", "jobs"))
    env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}
    roots = [str(file_stream.checkpoint), str(file_stream.landing), str(file_stream.archive)]
    child = subprocess.Popen(
        [sys.executable, "-m", "hubflow.operations.archive", *roots, "--max-workers", "2"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for line in child.stdout:
            if line.startswith("Archived 100/"):
                child.send_signal(signal.SIGKILL)
                break
    finally:
        child.kill()
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    assert 0 < len(relative_files(file_stream.landing)) < len(landed)

    archive(file_stream)

    assert contents(file_stream.archive) == landed
    assert relative_files(file_stream.landing) == []


def test_files_that_fail_do_not_stop_the_others_and_a_rerun_finishes(file_stream: FileStream) -> None:
    blocked_folder = "région=eu/2026/11/23"
    free = file_stream.land(3)
    blocked = file_stream.land(2, folder=blocked_folder)
    file_stream.run()
    landed = contents(file_stream.landing)
    blocker = file_stream.archive / blocked_folder
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where the archive needs a folder\n")

    with pytest.raises(ArchiveError, match="2 file\\(s\\) could not be archived") as failure:
        archive(file_stream)

    result = failure.value.result
    assert result.moved == names(free, file_stream.landing)
    assert sorted(result.errors) == names(blocked, file_stream.landing)
    assert all(path.exists() for path in blocked)
    blocker.unlink()
    assert archive(file_stream).moved == names(blocked, file_stream.landing)
    assert contents(file_stream.archive) == landed


def test_missing_or_damaged_checkpoint_is_an_error_that_moves_nothing(
    file_stream: FileStream, tmp_path: Path
) -> None:
    with pytest.raises(ArchiveError, match="No checkpoint at"):
        archive_processed_files(str(tmp_path / "nowhere"), str(file_stream.landing), str(file_stream.archive))

    file_stream.land_and_run(batches=1, files_per_batch=2)
    (file_stream.checkpoint / "sources" / "0" / "0").write_text("v1\n{not json")
    with pytest.raises(ArchiveError, match="Cannot read the checkpoint's logs"):
        archive(file_stream)
    assert len(relative_files(file_stream.landing)) == 2


def test_archive_on_a_non_local_filesystem(file_stream: FileStream) -> None:
    """The checkpoint and landing files of a real run, copied to fsspec's in-memory filesystem with the
    logged paths rewritten to ``memory://`` URIs: the object-store code path (no realpath, stripped
    protocols, copy + rename + delete through fsspec)."""
    [batch] = file_stream.land_and_run(batches=1, files_per_batch=3)
    memory = fsspec.filesystem("memory")
    base = f"/archive-test-{os.getpid()}"
    landing_prefix = "file://" + quote(str(file_stream.landing))
    try:
        memory.put(str(file_stream.checkpoint), f"{base}/checkpoint", recursive=True)
        memory.put(str(file_stream.landing), f"{base}/landing", recursive=True)
        log_file = f"{base}/checkpoint/sources/0/0"
        lines = memory.cat_file(log_file).decode().split("\n")
        assert all(landing_prefix in line for line in lines[1:])
        rewritten = [line.replace(landing_prefix, f"memory://{base}/landing") for line in lines]
        memory.pipe_file(log_file, "\n".join(rewritten).encode())

        result = archive_processed_files(
            f"memory://{base}/checkpoint",
            f"memory://{base}/landing",
            f"memory://{base}/archive",
            log=lambda line: None,
        )

        expected = names(batch, file_stream.landing)
        assert result.moved == expected
        assert sorted(p[len(f"{base}/archive/") :] for p in memory.find(f"{base}/archive")) == expected
        assert memory.find(f"{base}/landing") == []
        for name in expected:
            assert memory.cat_file(f"{base}/archive/{name}") == (file_stream.landing / name).read_bytes()
    finally:
        memory.rm(base, recursive=True)
