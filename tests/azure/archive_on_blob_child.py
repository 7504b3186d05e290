"""Test helper: archive on Blob in a child process, the way an Airflow worker would, and die on cue.

``python -m tests.azure.archive_on_blob_child CHECKPOINT LANDING ARCHIVE [POINT N]``, the storage
access in ``HUBFLOW_AZURE_STORAGE`` (what a driver or task gets from the job's storage connection).
With POINT the process SIGKILLs itself the N-th time it reaches that point (``after-copy``: an
archive copy is complete, its landing blob not deleted yet; ``before-copy``; ``any``: any point before
or after a copy or a delete). Eight workers move files in parallel, so the other files are at
random steps when it dies.
"""

from __future__ import annotations

import sys

from hubflow.operations.archive import archive_processed_files
from tests.azure.die_on_cue import die_at


def main(argv: list[str]) -> int:
    checkpoint, landing, archive, *point = argv
    if point:
        die_at(int(point[1]), None if point[0] == "any" else point[0])
    archive_processed_files(checkpoint, landing, archive, max_workers=8, log=print)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
