"""The ``hubflow`` command: a developer's terminal view of hubflow (docs/cli.md).

``hubflow check`` validates the registry, every job's config and every pipeline's binding before
anything runs; ``hubflow new pipeline`` writes a pipeline, its config, its unit test and its registry
entry; ``hubflow run`` runs a registered job in the foreground on local Spark; ``hubflow status``
shows what the status page shows. It is the top layer: it imports the control plane (``hubflow``)
and the driver side (``hubflow_jobs``), never Airflow (tests/control/test_import_rules.py checks it).
"""

from __future__ import annotations

import os
from pathlib import Path

#: The environment variable naming the hubflow repository (default: the one this package lives in).
HOME_ENV = "HUBFLOW_HOME"


def repo_root() -> Path:
    """The hubflow repository: ``$HUBFLOW_HOME``, else the parent of the ``cli/`` folder of this package."""
    configured = os.environ.get(HOME_ENV)
    if configured:
        return Path(configured).resolve()
    return Path(__file__).resolve().parents[2]
