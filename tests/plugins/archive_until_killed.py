"""Test helper: archive files and SIGKILL this very process at a chosen step of the N-th file.

Run as ``python -m tests.plugins.archive_until_killed CHECKPOINT LANDING ARCHIVE STEP N`` with
``plugins/`` on PYTHONPATH. STEP is where the process dies, on the N-th time it gets there:

* ``during-copy``: half of the file written to the temporary archive name;
* ``before-rename``: the temporary copy complete, not renamed yet;
* ``before-delete``: the archive copy in place, the landing copy not deleted yet.

The filesystem is the real local one; only the process death is arranged: the copy is written through
the filesystem's ``open`` (the archive reads a local landing file through a descriptor opened without
following links), the landing copy is deleted through :meth:`hubflow.storage.no_follow.NoFollowFile.remove`.
Four workers move files in parallel, so other files are at random steps when the process dies.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from fsspec.implementations.local import LocalFileSystem

from hubflow.operations.archive import TEMP_SUFFIX, archive_processed_files
from hubflow.storage.no_follow import NoFollowFile

STEPS = ("during-copy", "before-rename", "before-delete")


class KillingFileSystem(LocalFileSystem):
    """The local filesystem that kills its own process the N-th time a step is reached."""

    def __init__(self, step: str, after: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step, self.after = step, after
        self.count = 0
        self.lock = threading.Lock()

    def _reached(self, step: str) -> bool:
        if step != self.step:
            return False
        with self.lock:
            self.count += 1
            return self.count >= self.after

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        handle = super()._open(path, mode, **kwargs)
        if "w" in mode and path.endswith(TEMP_SUFFIX) and self._reached("during-copy"):
            return _DiesMidWrite(handle)
        return handle

    def mv(self, path1: str, path2: str, **kwargs: Any) -> None:
        if self._reached("before-rename"):
            os.kill(os.getpid(), signal.SIGKILL)
        super().mv(path1, path2, **kwargs)

    def dying_remove(self, remove: Callable[[NoFollowFile], bool]) -> Callable[[NoFollowFile], bool]:
        """``NoFollowFile.remove`` that dies instead, the N-th time."""

        def dies_first(planned: NoFollowFile) -> bool:
            if self._reached("before-delete"):
                os.kill(os.getpid(), signal.SIGKILL)
            return remove(planned)

        return dies_first


class _DiesMidWrite:
    """A temporary copy's writer that writes half of what it is given, then kills the process."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def write(self, data: bytes) -> int:
        self.handle.write(data[: len(data) // 2])
        self.handle.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        return len(data)

    def __enter__(self) -> _DiesMidWrite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.close()


def main(argv: list[str]) -> int:
    checkpoint, landing, archive, step, after = argv
    if step not in STEPS:
        raise SystemExit(f"step must be one of {STEPS}, got {step!r}")
    fs = KillingFileSystem(step, int(after), skip_instance_cache=True)
    NoFollowFile.remove = fs.dying_remove(NoFollowFile.remove)  # type: ignore[method-assign]
    archive_processed_files(checkpoint, landing, archive, max_workers=4, fs=fs, log=print)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
