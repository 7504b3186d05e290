"""The ``hubflow`` command: a developer's terminal view of hubflow (docs/cli.md).

``hubflow check`` validates the registry, every job's config and every pipeline's binding before
anything runs; ``hubflow new pipeline`` writes a pipeline, its config, its unit test and its registry
entry; ``hubflow run`` runs a registered job in the foreground on local Spark; ``hubflow status``
shows what the status page shows. It is the top layer: it imports ``hubflow_jobs`` and the
Airflow-free ``hubflow_plugins.core`` (and the status page's Airflow-free snapshot module), never
Airflow (tests/plugins/core/test_airflow_free.py checks it).

``plugins/`` is not an installed package (Airflow puts it on ``sys.path``); importing this package
puts ``<repository>/plugins`` on ``sys.path``, the repository being ``$HUBFLOW_HOME`` or the folder
holding ``cli/`` of this editable install.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

#: The environment variable naming the hubflow repository (default: the one this package lives in).
HOME_ENV = "HUBFLOW_HOME"


def repo_root() -> Path:
    """The hubflow repository: ``$HUBFLOW_HOME``, else the parent of the ``cli/`` folder of this package."""
    configured = os.environ.get(HOME_ENV)
    if configured:
        return Path(configured).resolve()
    return Path(__file__).resolve().parents[2]


def _plugins_on_path() -> None:
    """Make ``hubflow_plugins`` importable, as Airflow does for its plugins folder."""
    plugins = str(repo_root() / "plugins")
    if plugins not in sys.path:
        sys.path.append(plugins)


_plugins_on_path()
