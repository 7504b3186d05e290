"""Archiving on the real Blob API (Azurite): server-side copies, content identity, kills at any moment."""

from __future__ import annotations

import random
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hubflow.operations.archive import archive_processed_files
from hubflow.storage.blob_api import SOURCE_ETAG_METADATA
from tests.azure.blob_streams import BlobStream, start_child, upload_stream
from tests.plugins.file_streams import FileStream
from tests.support.azurite import Azurite

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]


def archive(stream: BlobStream, **kwargs: Any):
    kwargs.setdefault("log", lambda line: None)
    return archive_processed_files(stream.checkpoint, stream.landing, stream.archive, **kwargs)


@pytest.fixture
def blob_stream(file_stream: FileStream, azurite: Azurite, blob_access: Any):
    """Two committed batches of 6 files and one planned-but-uncommitted batch of 3, on Azurite."""
    file_stream.land_and_run(batches=2, files_per_batch=6)
    file_stream.land_and_run(batches=1, files_per_batch=3)
    file_stream.uncommit_last_batch()
    stream = upload_stream(file_stream, azurite, azurite.new_container("arch"))
    stream.uncommitted = {str(p.relative_to(file_stream.landing)) for p in file_stream.batches[-1]}
    return stream


def test_committed_files_move_by_server_side_copy_once(blob_stream: BlobStream) -> None:
    lines: list[str] = []
    result = archive(blob_stream, log=lines.append)

    committed = sorted(set(blob_stream.landed) - blob_stream.uncommitted)
    assert result.moved == committed and not result.errors and not result.conflicts
    assert any("server-side copies" in line for line in lines)
    archived = blob_stream.files("archive")
    assert archived == {name: blob_stream.landed[name] for name in committed}
    assert set(blob_stream.files("landing")) == blob_stream.uncommitted  # never early
    client = blob_stream.container_client()
    for name in committed:
        props = client.get_blob_client(f"archive/{name}").get_blob_properties()
        assert props.metadata[SOURCE_ETAG_METADATA]  # the landing version it is a copy of
    again = archive(blob_stream)
    assert again.moved == [] and again.already_archived == len(committed)


def test_already_archived_is_decided_by_content_not_by_size(blob_stream: BlobStream) -> None:
    """Archive copies made by other means (Spark's cleanSource, by hand) carry no hubflow metadata."""
    committed = sorted(set(blob_stream.landed) - blob_stream.uncommitted)
    same, different, unhashed = committed[0], committed[1], committed[2]
    client = blob_stream.container_client()
    client.upload_blob(f"archive/{same}", blob_stream.landed[same])  # same bytes, MD5 recorded
    flipped = bytes(reversed(blob_stream.landed[different]))  # same size, other bytes
    client.upload_blob(f"archive/{different}", flipped)
    # A block-list upload has no Content-MD5: identity needs the bytes themselves.
    client.get_blob_client(f"archive/{unhashed}").stage_block("b1", blob_stream.landed[unhashed])
    client.get_blob_client(f"archive/{unhashed}").commit_block_list(["b1"])
    assert (
        client.get_blob_client(f"archive/{unhashed}").get_blob_properties().content_settings.content_md5
        is None
    )

    result = archive(blob_stream)

    assert result.conflicts == [different]
    assert sorted(result.landing_copies_removed) == sorted([same, unhashed])
    assert blob_stream.files("landing")[different] == blob_stream.landed[different]
    assert blob_stream.files("archive")[different] == flipped


def test_a_landing_file_replaced_after_listing_is_not_deleted(blob_stream: BlobStream, monkeypatch) -> None:
    """The delete is conditional on the ETag that was copied: a newer version stays in landing."""
    from hubflow.storage import blob_api as blob_objects

    committed = sorted(set(blob_stream.landed) - blob_stream.uncommitted)
    victim = committed[0]
    original_copy = blob_objects.BlobObjects.copy

    def copy_then_overwrite(self, source, target, metadata=None):
        etag = original_copy(self, source, target, metadata)
        if source.url.path.endswith(victim):
            blob_stream.container_client().upload_blob(
                f"landing/{victim}", b"a newer upload\n", overwrite=True
            )
        return etag

    monkeypatch.setattr(blob_objects.BlobObjects, "copy", copy_then_overwrite)
    result = archive(blob_stream)

    assert result.conflicts == [victim]
    assert blob_stream.files("landing")[victim] == b"a newer upload\n"
    assert blob_stream.files("archive")[victim] == blob_stream.landed[victim]


def _child(stream: BlobStream, *point: str) -> subprocess.Popen:
    roots = (stream.checkpoint, stream.landing, stream.archive)
    return start_child(stream.azurite, "tests.azure.archive_on_blob_child", *roots, *point)


def _assert_nothing_lost_or_doubled(stream: BlobStream) -> None:
    """Every landed file is whole in landing or archive (both only when the archive one is a
    verified copy awaiting the landing delete); nothing else exists in the archive."""
    landing, archived = stream.files("landing"), stream.files("archive")
    assert set(landing) | set(archived) == set(stream.landed)
    for name, data in {**landing, **archived}.items():
        assert data == stream.landed[name], name
    client = stream.container_client()
    for name in set(landing) & set(archived):
        props = client.get_blob_client(f"archive/{name}").get_blob_properties()
        source = client.get_blob_client(f"landing/{name}").get_blob_properties()
        assert props.metadata[SOURCE_ETAG_METADATA] == source.etag.strip('"')


def _finish_and_check(stream: BlobStream) -> None:
    result = archive(stream)
    assert not result.errors and not result.conflicts
    committed = set(stream.landed) - stream.uncommitted
    assert stream.files("archive") == {name: stream.landed[name] for name in committed}
    assert set(stream.files("landing")) == stream.uncommitted


@pytest.mark.parametrize("step", ["after-copy", "before-copy"])
def test_killed_at_a_step_then_rerun_loses_nothing_and_archives_once(
    blob_stream: BlobStream, step: str
) -> None:
    child = _child(blob_stream, step, str(random.randint(2, 8)))
    output, _ = child.communicate(timeout=300)
    assert child.returncode == -signal.SIGKILL, output[-2000:]
    _assert_nothing_lost_or_doubled(blob_stream)
    assert len(blob_stream.files("landing")) > len(blob_stream.uncommitted)  # died mid-way

    _finish_and_check(blob_stream)


def _kill_at_random_moments(file_stream: FileStream, azurite: Azurite, kills: int) -> None:
    """``kills`` runs, each SIGKILLed at a random point of its copies and deletes, then a rerun."""
    file_stream.land_and_run(batches=1, files_per_batch=60)
    stream = upload_stream(file_stream, azurite, azurite.new_container("kill"))
    rng = random.Random()
    for attempt in range(kills):
        landing, archived = stream.files("landing"), stream.files("archive")
        copied = set(landing) & set(archived)
        # Points left: before/after the copy and the delete of a file not copied yet, before/after
        # the delete of one copied by a killed run. A file is only deleted after three points, so
        # dying within 3 x (files left) - 1 points leaves at least one file in landing.
        points = 4 * (len(landing) - len(copied)) + 2 * len(copied)
        if points < 2:
            break
        limit = 3 * len(landing) - 1 if attempt == 0 else points - 1
        child = _child(stream, "any", str(rng.randint(1, limit)))
        output, _ = child.communicate(timeout=300)
        assert child.returncode == -signal.SIGKILL, output[-2000:]
        _assert_nothing_lost_or_doubled(stream)
        left = stream.files("landing")
        assert len(left) <= len(landing)
        if attempt == 0:
            assert left  # died mid-way
    _finish_and_check(stream)


def test_killed_at_random_moments_then_rerun(
    file_stream: FileStream, azurite: Azurite, blob_access: Any
) -> None:
    _kill_at_random_moments(file_stream, azurite, kills=3)


@pytest.mark.slow
def test_killed_at_many_random_moments_then_rerun(
    file_stream: FileStream, azurite: Azurite, blob_access: Any
) -> None:
    _kill_at_random_moments(file_stream, azurite, kills=15)
