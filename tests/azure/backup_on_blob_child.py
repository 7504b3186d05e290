"""Test helper: back a checkpoint on Blob up in a child process and die at the N-th Blob operation point.

``python -m tests.azure.backup_on_blob_child CHECKPOINT [N]``, the storage access in
``HUBFLOW_AZURE_STORAGE``. Without N the backup runs to its end (the rerun after a kill).
"""

from __future__ import annotations

import sys

from hubflow.checkpoints.backups import backup_checkpoint
from tests.azure.die_on_cue import die_at


def main(argv: list[str]) -> int:
    checkpoint, *point = argv
    if point:
        die_at(int(point[0]))
    print(backup_checkpoint(checkpoint, log=print))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
