"""Checkpoint backups on the real Blob API (Azurite): never half-made, restorable, kills at random points."""

from __future__ import annotations

import random
import signal
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hubflow.checkpoints.backups import (
    MANIFEST,
    BackupError,
    backup_checkpoint,
    checkpoint_backups_root,
    list_backups,
    purge_checkpoint_backups,
    restore_checkpoint,
)
from hubflow.checkpoints.inspector import inspect_checkpoint
from tests.azure.blob_streams import BlobStream, start_child, upload_stream
from tests.plugins.file_streams import FileStream
from tests.support.azurite import Azurite

pytestmark = pytest.mark.integration


@pytest.fixture
def blob_checkpoint(file_stream: FileStream, azurite: Azurite, blob_access: Any) -> BlobStream:
    """A real Spark file-source checkpoint of four batches, on Azurite."""
    file_stream.land_and_run(batches=4, files_per_batch=2)
    return upload_stream(file_stream, azurite, azurite.new_container("ckpt"))


def _checkpoint_files(stream: BlobStream) -> dict[str, bytes]:
    return stream.files("checkpoint")


def _backup_files(stream: BlobStream, stamp: str) -> dict[str, bytes]:
    return stream.files(f"_backups/checkpoint/{stamp}")


def _inspect(url: str) -> dict[str, Any]:
    report = inspect_checkpoint(url, stalled_after=timedelta(days=3650)).to_dict()
    return {
        key: report[key]
        for key in ("verdict", "latest_offsets_batch_id", "latest_commit_batch_id", "sources")
    }


def test_backup_sets_the_checkpoint_aside_and_restore_brings_it_back(blob_checkpoint: BlobStream) -> None:
    original = _checkpoint_files(blob_checkpoint)
    before = _inspect(blob_checkpoint.checkpoint)
    assert before["verdict"] == "healthy" and before["latest_commit_batch_id"] == 3

    backup_url = backup_checkpoint(blob_checkpoint.checkpoint, now=datetime(2026, 11, 1, tzinfo=UTC))

    assert backup_url == checkpoint_backups_root(blob_checkpoint.checkpoint) + "/20261101T000000Z"
    assert list(blob_checkpoint.container_client().list_blobs(name_starts_with="checkpoint/")) == []
    copies = _backup_files(blob_checkpoint, "20261101T000000Z")
    assert copies.pop(MANIFEST)  # published last
    assert copies == original
    [backup] = list_backups(blob_checkpoint.checkpoint)
    assert set(backup.files) == set(original)
    assert _inspect(blob_checkpoint.checkpoint)["verdict"] == "missing"

    replaced = restore_checkpoint(blob_checkpoint.checkpoint, backup.stamp)

    assert replaced is None  # nothing was at the location
    assert _checkpoint_files(blob_checkpoint) == original
    assert _inspect(blob_checkpoint.checkpoint) == before
    assert [b.stamp for b in list_backups(blob_checkpoint.checkpoint)] == [backup.stamp]  # the backup stays


def test_restore_over_a_newer_checkpoint_keeps_that_one_as_a_backup(blob_checkpoint: BlobStream) -> None:
    original = _checkpoint_files(blob_checkpoint)
    backup_checkpoint(blob_checkpoint.checkpoint, now=datetime(2026, 11, 1, tzinfo=UTC))
    client = blob_checkpoint.container_client()
    client.upload_blob("checkpoint/metadata", b'{"id":"a new query"}')
    client.upload_blob("checkpoint/offsets/0", b'v1\n{"batchWatermarkMs":0}\n{"logOffset":0}')

    replaced = restore_checkpoint(blob_checkpoint.checkpoint, "20261101T000000Z")

    assert _checkpoint_files(blob_checkpoint) == original
    newer = _backup_files(blob_checkpoint, replaced.rsplit("/", 1)[1])
    assert newer.pop(MANIFEST) and newer["metadata"] == b'{"id":"a new query"}'
    with pytest.raises(BackupError, match="no published backup 'nope'"):
        restore_checkpoint(blob_checkpoint.checkpoint, "nope")


def test_a_file_that_appears_during_the_backup_is_never_deleted(
    blob_checkpoint: BlobStream, monkeypatch
) -> None:
    """A running job (which must not be) writing meanwhile: the backup says so and deletes nothing new."""
    from hubflow.checkpoints import backups as checkpoint_backups

    original_publish = checkpoint_backups._BlobTree.publish

    def publish_while_the_job_writes(self, folder, manifest):
        blob_checkpoint.container_client().upload_blob(
            "checkpoint/commits/4", b'v1\n{"nextBatchWatermarkMs":0}'
        )
        return original_publish(self, folder, manifest)

    monkeypatch.setattr(checkpoint_backups._BlobTree, "publish", publish_while_the_job_writes)
    with pytest.raises(BackupError, match="changed or appeared while it was backed up"):
        backup_checkpoint(blob_checkpoint.checkpoint)
    assert set(_checkpoint_files(blob_checkpoint)) == {"commits/4"}


def _kill_backups_at_random_points(stream: BlobStream, kills: int) -> None:
    original = _checkpoint_files(stream)
    rng = random.Random()
    killed = 0
    for _ in range(kills):
        present = _checkpoint_files(stream)
        if not present:
            break
        # Each file is copied (2 points) then deleted (2 points), with the manifest (2) between.
        child = start_child(
            stream.azurite,
            "tests.azure.backup_on_blob_child",
            stream.checkpoint,
            str(rng.randint(1, 4 * len(original) + 1)),
        )
        output, _ = child.communicate(timeout=300)
        assert child.returncode in (0, -signal.SIGKILL), output[-2000:]
        killed += child.returncode == -signal.SIGKILL
        # Never a published backup that is not whole, never a file lost.
        published = list_backups(stream.checkpoint)
        assert len(published) <= 1
        left = _checkpoint_files(stream)
        if published:
            copies = _backup_files(stream, published[0].stamp)
            copies.pop(MANIFEST)
            assert copies == original
            assert all(original[name] == data for name, data in left.items())
        else:
            assert left == original
    assert killed >= 1
    finished = start_child(stream.azurite, "tests.azure.backup_on_blob_child", stream.checkpoint)
    output, _ = finished.communicate(timeout=300)
    assert finished.returncode == 0, output[-2000:]
    [backup] = list_backups(stream.checkpoint)
    copies = _backup_files(stream, backup.stamp)
    copies.pop(MANIFEST)
    assert copies == original and _checkpoint_files(stream) == {}
    stamps = {
        p.name.split("/")[2]
        for p in stream.container_client().walk_blobs("_backups/checkpoint/", delimiter="/")
    }
    assert stamps == {backup.stamp}  # unfinished staging folders were removed


def test_backup_killed_at_random_points_is_never_half_made(blob_checkpoint: BlobStream) -> None:
    _kill_backups_at_random_points(blob_checkpoint, kills=3)


@pytest.mark.slow
def test_backup_killed_at_many_random_points(blob_checkpoint: BlobStream) -> None:
    _kill_backups_at_random_points(blob_checkpoint, kills=12)


def test_purge_deletes_old_backups_and_leftover_staging(blob_checkpoint: BlobStream) -> None:
    old = backup_checkpoint(blob_checkpoint.checkpoint, now=datetime(2026, 1, 1, tzinfo=UTC))
    restore_checkpoint(blob_checkpoint.checkpoint, "20260101T000000Z")
    recent = backup_checkpoint(blob_checkpoint.checkpoint, now=datetime(2026, 3, 1, tzinfo=UTC))
    blob_checkpoint.container_client().upload_blob("_backups/checkpoint/20260102T000000Z/offsets/0", b"v1")

    deleted = purge_checkpoint_backups(
        blob_checkpoint.checkpoint, timedelta(days=30), now=datetime(2026, 3, 2, tzinfo=UTC)
    )

    assert sorted(deleted) == sorted(
        [old, checkpoint_backups_root(blob_checkpoint.checkpoint) + "/20260102T000000Z"]
    )
    assert [b.url for b in list_backups(blob_checkpoint.checkpoint)] == [recent]
