"""The archive never follows a symbolic link it did not plan (issue #50 item 5).

A landing writer swaps a committed file (or the folder holding it) for a symbolic link to a secret
file after the archive planned its moves and before it copies: the secret is not copied into the
archive, the swapped path is reported as skipped with the reason, nothing is deleted (the link, its
target and whatever the writer moved aside stay), and every other file is archived as usual. The
swap happens in the archive's own log callback, called after the plan ("... still in <landing>;
archiving to ...") and before the first copy. No Spark: the checkpoint is a synthetic one in Spark's
format (tests/support/file_source_checkpoint.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import fsspec
import pytest

from hubflow.operations.archive import archive_processed_files
from tests.support.file_source_checkpoint import write_file_source_checkpoint

SECRET = b"-----BEGIN PRIVATE KEY----- not for the archive\n"


def landing_world(tmp_path: Path, folder: str = "") -> tuple[Path, Path, Path, list[str]]:
    """Checkpoint, landing root and archive root of a query that committed 3 batches of one file each
    (in ``folder`` under the landing root); returns the files' paths relative to the landing root."""
    checkpoint, landing, archive = tmp_path / "checkpoint", tmp_path / "landing", tmp_path / "archive"
    files_dir = landing / folder if folder else landing
    files_dir.mkdir(parents=True)
    write_file_source_checkpoint(fsspec.filesystem("file"), str(checkpoint), 3, f"file://{files_dir}")
    names = [f"batch-{batch:06d}-0.json" for batch in range(3)]
    for batch, name in enumerate(names):
        (files_dir / name).write_text(f'{{"id": {batch}}}\n')
    relative = [f"{folder}/{name}" if folder else name for name in names]
    return checkpoint, landing, archive, relative


def run_with_swap(
    checkpoint: Path, landing: Path, archive: Path, swap: Callable[[], None], **kwargs: object
) -> tuple[object, list[str]]:
    """Archive with ``swap`` done right after the plan is logged, before any file is copied."""
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        if "of committed batches" in line and "still in" in line:
            swap()

    result = archive_processed_files(
        str(checkpoint), str(landing), str(archive), log=log, max_workers=1, **kwargs
    )
    return result, lines


def archived_bytes(archive: Path) -> list[bytes]:
    return [path.read_bytes() for path in sorted(archive.rglob("*")) if path.is_file()]


def test_a_file_swapped_for_a_link_after_planning_is_skipped_not_followed(tmp_path: Path) -> None:
    checkpoint, landing, archive, files = landing_world(tmp_path)
    secret = tmp_path / "secrets" / "storage.key"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    swapped = landing / files[1]
    original = swapped.read_bytes()

    def swap() -> None:
        # The writer keeps the committed file elsewhere and puts a link in its place, atomically.
        os.link(swapped, tmp_path / "kept-by-the-writer.json")
        (landing / ".swap").symlink_to(secret)
        os.replace(landing / ".swap", swapped)

    result, lines = run_with_swap(checkpoint, landing, archive, swap)

    assert SECRET not in b"".join(archived_bytes(archive)), "the secret was copied into the archive"
    assert not (archive / files[1]).exists()
    assert result.moved == [files[0], files[2]]
    assert list(result.skipped) == [files[1]]
    assert result.skipped[files[1]].startswith(
        f"{swapped} is a symbolic link now, not what the archive planned"
    )
    assert "nothing was copied or removed" in result.skipped[files[1]]
    assert f"Skipped {files[1]}: {result.skipped[files[1]]}" in lines
    assert "1 skipped" in lines[-1]
    # Nothing lost: the link, its target and the committed file's data are all where they were.
    assert swapped.is_symlink() and secret.read_bytes() == SECRET
    assert (tmp_path / "kept-by-the-writer.json").read_bytes() == original
    assert [p.read_bytes() for p in (archive / files[0], archive / files[2])] == [
        b'{"id": 0}\n',
        b'{"id": 2}\n',
    ]

    # A rerun plans with the link in place: the path resolves outside the landing root and is refused
    # before any copy, as before this change; nothing else happens.
    again = archive_processed_files(str(checkpoint), str(landing), str(archive), log=lambda line: None)
    assert again.moved == [] and again.skipped == {}
    assert [why for path, why in again.refused.items() if path.endswith(files[1])] == [
        "is outside the landing root"
    ]
    assert swapped.is_symlink() and secret.read_bytes() == SECRET


def test_a_folder_swapped_for_a_link_after_planning_is_not_followed(tmp_path: Path) -> None:
    """The link is a folder of the planned path, not the file itself: O_NOFOLLOW on the file alone
    would miss it, so every folder below the landing root is opened without following links too."""
    checkpoint, landing, archive, files = landing_world(tmp_path, folder="2026/11")
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    for name in files:
        (secrets / Path(name).name).write_bytes(SECRET)

    def swap() -> None:
        os.rename(landing / "2026" / "11", landing / "2026" / "11.moved-aside")
        (landing / "2026" / "11").symlink_to(secrets, target_is_directory=True)

    result, _ = run_with_swap(checkpoint, landing, archive, swap)

    assert SECRET not in b"".join(archived_bytes(archive))
    assert result.moved == [] and sorted(result.skipped) == files
    assert all(
        why.startswith(f"its folder {landing}/2026/11 is a symbolic link now")
        for why in result.skipped.values()
    ), result.skipped
    # Nothing deleted: not the secrets behind the link, not the files the writer moved aside.
    assert all((secrets / Path(name).name).read_bytes() == SECRET for name in files)
    assert sorted(p.name for p in (landing / "2026" / "11.moved-aside").iterdir()) == [
        Path(n).name for n in files
    ]


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_file_already_archived_whose_landing_copy_became_a_link_is_left_alone(
    tmp_path: Path, dry_run: bool
) -> None:
    """A killed run left the file in both places; the landing copy is then swapped for a link to a
    file of the same bytes. The rerun must not judge (nor remove) the link by its target's content."""
    checkpoint, landing, archive, files = landing_world(tmp_path)
    (archive).mkdir()
    (archive / files[0]).write_bytes((landing / files[0]).read_bytes())
    lookalike = tmp_path / "lookalike.json"
    lookalike.write_bytes((landing / files[0]).read_bytes())

    def swap() -> None:
        (landing / files[0]).unlink()
        (landing / files[0]).symlink_to(lookalike)

    result, _ = run_with_swap(checkpoint, landing, archive, swap, dry_run=dry_run)

    assert list(result.skipped) == [files[0]] and result.landing_copies_removed == []
    assert (landing / files[0]).is_symlink() and lookalike.exists()


def test_a_fifo_swapped_in_is_skipped_without_blocking(tmp_path: Path) -> None:
    """Opening a FIFO to read would wait for a writer forever; the file is opened non-blocking and
    refused for not being a regular file."""
    checkpoint, landing, archive, files = landing_world(tmp_path)

    def swap() -> None:
        (landing / files[2]).unlink()
        os.mkfifo(landing / files[2])

    result, _ = run_with_swap(checkpoint, landing, archive, swap)

    assert result.moved == files[:2]
    assert result.skipped[files[2]].startswith(f"{landing / files[2]} is a FIFO now")
    assert (landing / files[2]).exists()


def test_a_name_replaced_after_the_copy_is_not_removed(tmp_path: Path) -> None:
    """The file was read through its descriptor; its name is swapped for a link before the landing copy
    is removed: the link is not removed (nor followed), the archive keeps the bytes that were read."""
    from hubflow.storage.no_follow import NoFollowFile, UnplannedLink

    path = tmp_path / "landing" / "a.json"
    path.parent.mkdir()
    path.write_bytes(b"planned bytes\n")
    (tmp_path / "secret").write_bytes(SECRET)
    with NoFollowFile(str(path)) as planned:
        assert b"".join(planned.chunks()) == b"planned bytes\n"
        (tmp_path / "landing" / ".swap").symlink_to(tmp_path / "secret")
        os.replace(tmp_path / "landing" / ".swap", path)
        with pytest.raises(UnplannedLink, match="was replaced by a symbolic link after it was read"):
            planned.remove()
    assert path.is_symlink() and (tmp_path / "secret").read_bytes() == SECRET
