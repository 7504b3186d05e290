"""Shared helpers of the ``hubflow`` command's tests: run the installed executable, write pipelines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

#: The console script the project's setup installs (scripts/bootstrap.sh: ``-e cli``).
HUBFLOW = Path(sys.executable).parent / "hubflow"


def hubflow(
    *args: str | Path,
    pipelines: Path | None = None,
    timeout: float = 120,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """Run ``hubflow ARGS`` (its pipelines folder ``pipelines`` when given, ``env`` added to this
    environment); output as text."""
    env = {**os.environ, **(env or {})}
    if pipelines is not None:
        env["HUBFLOW_PIPELINES_DIR"] = str(pipelines)
    return subprocess.run(
        [str(HUBFLOW), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


def output(result: subprocess.CompletedProcess) -> str:
    """stdout and stderr of a run, for assertions and failure messages."""
    return result.stdout + result.stderr


def pipeline_config(base: Path, name: str, **overrides: Any) -> dict[str, Any]:
    """A valid pipeline config under ``base``: files source ``orders`` (its folder created), a Delta sink."""
    landing = base / "landing" / name
    landing.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "name": name,
        "trigger": {"availableNow": True},
        "checkpoint_root": str(base / "checkpoints"),
        "status_root": str(base / "status"),
        "sources": {
            "orders": {"kind": "files", "path": str(landing), "format": "json", "schema": "id BIGINT"}
        },
        "sinks": {"lake": {"kind": "delta", "output_path": str(base / "lake" / name)}},
        "params": {"threshold": 5},
    }
    config.update(overrides)
    return config


#: A pipeline module that binds to :func:`pipeline_config`'s source and params.
GOOD_MODULE = """
from pydantic import BaseModel


class Params(BaseModel):
    threshold: float


def transform(orders, params: Params):
    return orders.where(orders.id > params.threshold)
"""


def add_pipeline(
    base: Path, name: str, module: str | None = GOOD_MODULE, application: str | None = None, **config: Any
) -> dict[str, Any]:
    """Write ``pipelines/<name>.py`` (unless ``module`` is None) and ``configs/<name>.yaml`` under ``base``;
    return the job's registry entry."""
    pipelines = base / "pipelines"
    (pipelines / "configs").mkdir(parents=True, exist_ok=True)
    if module is not None:
        (pipelines / f"{name}.py").write_text(module, encoding="utf-8")
    config_path = pipelines / "configs" / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump(pipeline_config(base, name, **config)), encoding="utf-8")
    return {
        "name": name,
        "application": application or f"{name}:transform",
        "config": str(config_path),
        "mode": "scheduled",
        "schedule": "@hourly",
    }


def write_registry(path: Path, jobs: list[dict[str, Any]]) -> Path:
    """A registry file holding ``jobs``."""
    path.write_text(yaml.safe_dump({"jobs": jobs}, sort_keys=False), encoding="utf-8")
    return path
