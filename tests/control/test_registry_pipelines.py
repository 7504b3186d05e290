"""A registry entry naming a pipeline function (``application: module:function``): what the Airflow
side reads from it and from its config, and the DAGs it gets. No Spark, no scheduler."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hubflow.invocation import JobInvocation
from hubflow.registry import RegistryError, load_registry, read_job_paths
from hubflow_plugins.dag_factory import build_dags
from tests.dags.helpers import write_registry

BASE = {"trigger": {"availableNow": True}, "checkpoint_root": "/c", "status_root": "/s"}


def _config(path: Path, **keys: Any) -> Path:
    path.write_text(yaml.safe_dump({"name": "hot", **BASE, **keys}), encoding="utf-8")
    return path


def _entry(config: Path, **keys: Any) -> dict[str, Any]:
    return {
        "name": "hot",
        "application": "hot_devices:transform",
        "config": str(config),
        "mode": "scheduled",
        "schedule": "@hourly",
        **keys,
    }


def test_a_pipeline_entry_runs_the_pipeline_script_with_its_function(tmp_path: Path) -> None:
    sources = {"telemetry": {"kind": "eventhubs", "connection_string_env": "NOT_SET_WHERE_AIRFLOW_READS_IT"}}
    sinks = {"hot": {"kind": "delta", "output_path": "/lake/hot"}}
    config = _config(tmp_path / "hot.yaml", sources=sources, sinks=sinks)
    job = load_registry(write_registry(tmp_path, [_entry(config)])).job("hot")
    assert job.is_pipeline
    assert job.application_path(tmp_path).name == "pipeline.py"
    assert JobInvocation.run(job).args[2:] == ("--pipeline", "hot_devices:transform")
    paths = job.paths
    assert (paths.checkpoint_location, paths.status_dir, paths.trigger) == (
        "/c/hot",
        "/s/hot",
        "availableNow",
    )
    assert paths.landing_root is None


def test_a_pipelines_tables_landing_and_archive_come_from_its_declared_sources_and_sinks(
    tmp_path: Path,
) -> None:
    landing = {
        "kind": "files",
        "path": "/landing",
        "format": "json",
        "schema": "id INT",
        "archive_dir": "/arch",
    }
    sinks = {"all": {"kind": "delta", "output_path": "/lake/all", "quarantine_path": "/lake/bad"}}
    one = read_job_paths(_config(tmp_path / "one.yaml", sources={"orders": landing}, sinks=sinks), "m:f")
    assert (one.landing_root, one.archive_dir) == ("/landing", "/arch")
    assert [(s.table, s.checkpoint) for s in one.delta_sinks] == [
        ("/lake/all", "/c/hot"),
        ("/lake/bad", "/c/hot"),
    ]

    unarchived = {key: value for key, value in landing.items() if key != "archive_dir"}
    two_sinks = {
        **sinks,
        "hot": {"kind": "delta", "output_path": "/lake/hot"},
        "raw": {"kind": "parquet", "output_path": "/p"},
    }
    two = read_job_paths(
        _config(tmp_path / "two.yaml", sources={"orders": unarchived}, sinks=two_sinks), "m:f"
    )
    assert [(s.table, s.checkpoint) for s in two.delta_sinks] == [
        ("/lake/all", "/c/hot"),
        ("/lake/bad", "/c/hot"),
        ("/lake/hot", "/c/hot/sinks/hot"),
    ]
    assert two.parquet_outputs == ["/p"], "a parquet sink's table is announced as an asset too"
    assert two.archive_dir is None


def test_an_unknown_application_names_both_kinds_of_valid_value(tmp_path: Path) -> None:
    config = _config(tmp_path / "hot.yaml", sources={}, sinks={})
    with pytest.raises(
        RegistryError, match=r"unknown application 'hot_devices'.*or a pipeline function module:function"
    ):
        read_job_paths(config, "hot_devices")


def test_a_pipeline_job_gets_the_dags_of_its_mode_and_delta_maintenance(tmp_path: Path) -> None:
    config = tmp_path / "hot.yaml"  # read when a task runs, never at parse time
    streaming = _entry(config, name="live", mode="streaming", schedule=None)
    dags = build_dags(load_registry(write_registry(tmp_path, [_entry(config), streaming])))
    assert {"hot__available_now", "live__supervisor", "hubflow__cleanup"} <= set(dags)
    assert {"delta_maintenance_hot", "delta_maintenance_live"} <= set(dags["hubflow__cleanup"].task_ids)


def test_a_real_time_job_is_stalled_only_after_three_checkpoint_intervals(tmp_path: Path) -> None:
    """docs/pipelines.md "Real-time pipelines": a real-time batch runs its checkpoint interval."""
    hub = {"kind": "eventhubs_kafka", "connection_string_env": "NOT_SET_WHERE_AIRFLOW_READS_IT"}
    config = _config(
        tmp_path / "hot.yaml",
        trigger={"realTime": "5 minutes"},
        sources={"telemetry": {**hub, "eventhub_name": "in"}},
        sinks={"hot": {**hub, "eventhub_name": "out"}},
    )
    registry = write_registry(
        tmp_path, [_entry(config, mode="streaming", schedule=None, stalled_after="1 minute")]
    )
    job = load_registry(registry).job("hot")
    assert (job.paths.trigger, job.paths.real_time_interval_seconds) == ("realTime", 300.0)
    assert job.stalled_after_delta.total_seconds() == 900, "three intervals, not stalled_after"
    longer = write_registry(
        tmp_path, [_entry(config, mode="streaming", schedule=None, stalled_after="1 hour")]
    )
    assert load_registry(longer).job("hot").stalled_after_delta.total_seconds() == 3600
