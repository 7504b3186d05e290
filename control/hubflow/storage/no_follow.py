"""A local file at a planned path, opened without following any symbolic link.

A path planned minutes ago (by the archive: a file a committed batch read) may meanwhile have been
swapped for a symbolic link - the file itself, or any folder on its way - by whoever can write the
folder it is in. Opening it by name would follow the link to whatever file it names. :class:`NoFollowFile`
opens every folder of the path from ``/`` with ``O_NOFOLLOW | O_DIRECTORY``, each relative to the
descriptor of its parent (``openat``), then the file with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO swapped in
does not block), and accepts only a regular file. The path must be the one planned, symlink-free
(``os.path.realpath`` when it was planned): any link found now was not planned, and :class:`UnplannedLink`
says which part is one. Reads go through the open descriptor; :meth:`NoFollowFile.remove` unlinks the
name only while it still is the file that was opened, in the folder that was opened.

Local filesystems only (POSIX): object stores (Azure Blob, ADLS) have no symbolic links, and their
copies are pinned to the version planned by its ETag instead.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: Bytes read at a time.
CHUNK = 8 * 1024 * 1024


class UnplannedLink(OSError):
    """The planned path is not the plain file it was: a part of it is a symbolic link now, or the file
    is no regular file. The message names the part and what it is."""


class NoFollowFile:
    """The regular file at the absolute path ``path``, opened without following a symbolic link.

    Raises :class:`UnplannedLink` when a folder of the path or the file is a symbolic link (or the file
    is not a regular file), ``FileNotFoundError`` when a part of it does not exist.
    """

    def __init__(self, path: str) -> None:
        if not path.startswith("/"):
            raise ValueError(f"{path}: an absolute path is needed")
        *folders, self.name = [part for part in path.split("/") if part]
        self.path = path
        self.folder_fd = os.open("/", _FOLDER_FLAGS)
        self.fd = -1
        try:
            walked = ""
            for folder in folders:
                walked += "/" + folder
                self.folder_fd = self._descend(folder, walked)
            try:
                self.fd = os.open(self.name, _FILE_FLAGS, dir_fd=self.folder_fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnplannedLink(exc.errno, f"{path} is {self._what(self.name)} now") from None
                raise
            self.stat = os.fstat(self.fd)
            if not stat.S_ISREG(self.stat.st_mode):
                raise UnplannedLink(errno.EINVAL, f"{path} is {_kind(self.stat.st_mode)} now")
        except BaseException:
            self.close()
            raise

    def _descend(self, name: str, walked: str) -> int:
        try:
            child = os.open(name, _FOLDER_FLAGS, dir_fd=self.folder_fd)
        except OSError as exc:
            # Linux answers O_DIRECTORY | O_NOFOLLOW on a link with ENOTDIR, other systems with ELOOP.
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise UnplannedLink(exc.errno, f"its folder {walked} is {self._what(name)} now") from None
            raise
        os.close(self.folder_fd)
        return child

    def _what(self, name: str) -> str:
        """What ``name`` in the current folder is, for a message (``a symbolic link``...)."""
        try:
            return _kind(os.stat(name, dir_fd=self.folder_fd, follow_symlinks=False).st_mode)
        except OSError:
            return "something else"

    @property
    def size(self) -> int:
        """The file's size when it was opened."""
        return self.stat.st_size

    def chunks(self) -> Iterator[bytes]:
        """The file's bytes from its start, read through the open descriptor."""
        offset = 0
        while chunk := os.pread(self.fd, CHUNK, offset):
            yield chunk
            offset += len(chunk)

    def still_named(self) -> bool:
        """Whether its name in its folder still is this file (not removed, not replaced)."""
        try:
            now = os.stat(self.name, dir_fd=self.folder_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return (now.st_dev, now.st_ino) == (self.stat.st_dev, self.stat.st_ino)

    def remove(self) -> bool:
        """Unlink its name, in the folder that was opened, while the name still is this file: True when
        removed, False when the name is gone; :class:`UnplannedLink` (nothing removed) when the name is
        a symbolic link or another file now.

        Linux has no unlink-if-same-file: a swap in the microseconds between the check and the unlink
        would unlink what was swapped in - never a link's target, and never this file's data, which the
        caller has copied by then.
        """
        try:
            now = os.stat(self.name, dir_fd=self.folder_fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if (now.st_dev, now.st_ino) != (self.stat.st_dev, self.stat.st_ino):
            what = _kind(now.st_mode) if not stat.S_ISREG(now.st_mode) else "another file"
            raise UnplannedLink(errno.EEXIST, f"{self.path} was replaced by {what} after it was read")
        try:
            os.unlink(self.name, dir_fd=self.folder_fd)
        except FileNotFoundError:
            return False
        return True

    def close(self) -> None:
        for fd in (self.fd, self.folder_fd):
            if fd >= 0:
                os.close(fd)
        self.fd = self.folder_fd = -1

    def __enter__(self) -> NoFollowFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _kind(mode: int) -> str:
    """``a symbolic link``, ``a folder``, ``a FIFO``... for a message."""
    for test, kind in (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return kind
    return "no regular file"
