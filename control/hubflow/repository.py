"""Where the repository's folders are when no setting names others: the registry's, the jobs',
the user's pipeline modules'. One owner for the path rules the registry, the supervisor and the
driver share."""

from __future__ import annotations

import os
from pathlib import Path

#: The hubflow repository this control plane is part of (``control/hubflow/`` is two levels down).
REPO_ROOT = Path(__file__).resolve().parents[2]
#: Names the folder of the user's pipeline modules (default: ``pipelines/`` of the repository).
PIPELINES_DIR_ENV = "HUBFLOW_PIPELINES_DIR"


def pipelines_folder() -> Path:
    """The folder of the user's pipeline modules: ``$HUBFLOW_PIPELINES_DIR``, else ``pipelines/``."""
    configured = os.environ.get(PIPELINES_DIR_ENV)
    if configured:
        return Path(configured)
    return REPO_ROOT / "pipelines"
