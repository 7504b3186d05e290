"""Makes the local data folders the registered jobs need, owned by the image's user (uid 50000).

airflow-init runs it as root on the shared volume (``/opt/hubflow/data``): the landing folder of
every file job must exist before the job starts (its config check refuses a missing one), and the
status and checkpoint roots are where supervisors and jobs write. Remote paths (``abfss://``) are
left alone. Reads the registry with the control plane (``hubflow``, installed in the image).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hubflow.registry import load_registry

OWNER = (50000, 0)


def make_owned(folder: Path) -> None:
    """Create ``folder`` and its missing parents, each owned by :data:`OWNER`."""
    missing = []
    for path in [folder, *folder.parents]:
        if path.exists():
            break
        missing.append(path)
    for path in reversed(missing):
        path.mkdir()
        os.chown(path, *OWNER)


def main() -> int:
    for job in load_registry().jobs:
        paths = job.paths
        # Jobs make their own status and checkpoint folders; the roots and landing must exist.
        folders = [
            paths.landing_root,
            os.path.dirname(paths.status_dir),
            os.path.dirname(paths.checkpoint_location),
        ]
        for folder in folders:
            if folder and "://" not in folder:
                make_owned(Path(folder))
                print(f"job {job.name}: {folder} ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
