"""Pipelines of test modules: their source files, their configs, and a run on the shared session."""

from __future__ import annotations

import functools
import textwrap
from pathlib import Path
from typing import Any

from hubflow_jobs.pipeline.job import load_pipeline
from hubflow_jobs.pipeline.streams import start_pipeline
from hubflow_jobs.runtime.runner import run_job
from hubflow_jobs.runtime.stop import StopRequest

from .helpers import write_config


def write_module(folder: Path, name: str, text: str) -> None:
    """Write the pipeline module ``<folder>/<name>.py`` (``text`` dedented)."""
    (folder / f"{name}.py").write_text(textwrap.dedent(text), encoding="utf-8")


def pipeline_config(base: Path, name: str, **sections: Any) -> Path:
    """A pipeline config under ``base`` (availableNow, quick runtime) with ``sections``; its path."""
    config: dict[str, Any] = {
        "name": name,
        "trigger": {"availableNow": True},
        "checkpoint_root": str(base / "checkpoints"),
        "status_root": str(base / "status"),
        "spark_conf": {"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": False},
        "runtime": {"heartbeat_interval": "1 second", "poll_interval": "200 ms"},
        **sections,
    }
    return write_config(base / f"{name}.yaml", config)


def run_on_session(spark: Any, reference: str, config_path: Path) -> tuple[int, str]:
    """Run the pipeline on the shared session as ``jobs/pipeline.py`` would, without its process."""
    config, binding = load_pipeline(reference, str(config_path))
    return run_job(spark, config, functools.partial(start_pipeline, binding=binding), StopRequest())
