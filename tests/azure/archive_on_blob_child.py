"""Test helper: archive on Blob in a child process, the way an Airflow worker would, and die on cue.

``python -m tests.azure.archive_on_blob_child CHECKPOINT LANDING ARCHIVE [STEP N]``, the storage access
in ``HUBFLOW_AZURE_STORAGE`` (what a driver or task gets from the job's storage connection). With
STEP the process SIGKILLs itself the N-th time it reaches that step:

* ``after-copy``: an archive copy is complete, its landing blob not deleted yet;
* ``before-copy``: nothing done yet for that file;
* ``any``: any point before or after a copy or a delete (the parent draws N at random).

Eight workers move files in parallel, so the other files are at random steps when it dies. The
storage is the real Blob API (Azurite); only the moment of death is arranged.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from hubflow_jobs.blob_objects import BlobObjects
from hubflow_plugins.archive import archive_processed_files

STEPS = ("after-copy", "before-copy", "any")


def die_at(step: str, after: int) -> None:
    """Patch the Blob operations to SIGKILL this process the ``after``-th time ``step`` is reached."""
    lock = threading.Lock()
    count = [0]

    def reached(point: str) -> None:
        if step != "any" and point != step:
            return
        with lock:
            count[0] += 1
            if count[0] >= after:
                os.kill(os.getpid(), signal.SIGKILL)

    def wrap(name: str) -> None:
        original = getattr(BlobObjects, name)

        def operation(self: BlobObjects, *args: Any, **kwargs: Any) -> Any:
            reached(f"before-{name}")
            result = original(self, *args, **kwargs)
            reached(f"after-{name}")
            return result

        setattr(BlobObjects, name, operation)

    wrap("copy")
    wrap("delete")


def main(argv: list[str]) -> int:
    checkpoint, landing, archive, *step = argv
    if step:
        if step[0] not in STEPS:
            raise SystemExit(f"step must be one of {STEPS}, got {step[0]!r}")
        die_at(step[0], int(step[1]))
    archive_processed_files(checkpoint, landing, archive, max_workers=8, log=print)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
