"""Checkpoint backups on a local disk, restored and resumed by Spark itself."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hubflow.checkpoints.backups import (
    MANIFEST,
    backup_checkpoint,
    list_backups,
    restore_checkpoint,
)
from tests.plugins.file_streams import FileStream, relative_files

pytestmark = pytest.mark.integration


def test_spark_resumes_from_a_restored_backup_without_reading_anything_twice(file_stream: FileStream) -> None:
    file_stream.land_and_run(batches=2, files_per_batch=2)
    before = {
        name: (file_stream.checkpoint / name).read_bytes() for name in relative_files(file_stream.checkpoint)
    }

    backup = backup_checkpoint(str(file_stream.checkpoint), now=datetime(2026, 11, 22, tzinfo=UTC))

    assert not file_stream.checkpoint.exists()
    assert sorted(
        relative_files(file_stream.base / "_backups" / "checkpoint" / "20261122T000000Z")
    ) == sorted([*before, MANIFEST])
    [listed] = list_backups(str(file_stream.checkpoint))
    assert listed.url == backup and set(listed.files) == set(before)

    restore_checkpoint(str(file_stream.checkpoint), listed.stamp)
    restored = {
        name: (file_stream.checkpoint / name).read_bytes() for name in relative_files(file_stream.checkpoint)
    }
    assert restored == before
    file_stream.land(2)
    file_stream.run()

    assert file_stream.output_ids() == list(range(4 * 3 + 2 * 3))  # every event once
    commits = sorted(int(p.name) for p in (file_stream.checkpoint / "commits").iterdir() if p.name.isdigit())
    assert commits == [0, 1, 2]  # the restored query went on with its next batch


def test_the_backup_command_asks_for_the_status_folder_or_an_explicit_no_lease_check(
    tmp_path, capsys: pytest.CaptureFixture
) -> None:
    """From a shell, a backup or restore without ``--status-dir`` would move a checkpoint a driver may
    be writing: the command needs the status folder, or ``--no-lease-check`` said out loud."""
    from hubflow.checkpoints.backups import list_backups, main

    checkpoint = tmp_path / "checkpoints" / "clicks"
    (checkpoint / "commits").mkdir(parents=True)
    (checkpoint / "commits" / "0").write_text("v1\n{}")
    with pytest.raises(SystemExit) as refused:
        main(["backup", str(checkpoint)])
    assert refused.value.code == 2
    assert "one of the arguments --status-dir --no-lease-check is required" in capsys.readouterr().err
    assert not list_backups(str(checkpoint)) and (checkpoint / "commits" / "0").exists(), "nothing moved"
    assert main(["backup", str(checkpoint), "--no-lease-check"]) == 0
    assert len(list_backups(str(checkpoint))) == 1 and not checkpoint.exists()
