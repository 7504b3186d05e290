"""A job's spark-submit call (:class:`~hubflow.invocation.JobInvocation`): built from the registry
entry in one place, rendered as a command line, and parsed by the entry scripts it names. No Spark."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any

import pytest
import yaml

from hubflow.invocation import ARG_CONFIG, ARG_PIPELINE, JobInvocation
from hubflow.registry import RegisteredJob, load_registry
from hubflow_jobs.pipeline import job as pipeline_job
from hubflow_jobs.runtime import runner
from tests.dags.helpers import write_registry

REPO = Path(__file__).resolve().parents[2]
SECRET = "Endpoint=sb://ns/;SharedAccessKeyName=send;SharedAccessKey=c2VjcmV0"


def _job(tmp_path: Path, application: str, **entry: Any) -> RegisteredJob:
    config = tmp_path / "orders.yaml"
    config.write_text(
        yaml.safe_dump(
            {"name": "orders", "checkpoint_root": "/c", "status_root": "/s", "team_env": "TEAM_CS"}
        ),
        encoding="utf-8",
    )
    registry = write_registry(
        tmp_path,
        [
            {
                "name": "orders",
                "application": application,
                "config": str(config),
                "mode": "scheduled",
                "schedule": "@hourly",
                **entry,
            }
        ],
    )
    return load_registry(registry).job("orders")


def _entry_parser(script: str) -> Any:
    """The ``main`` of an entry script of jobs/, loaded by its path (it is not a package module)."""
    spec = importlib.util.spec_from_file_location(f"entry_{script}", REPO / "jobs" / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_run_renders_the_entry_script_its_config_and_the_jobs_conf(tmp_path: Path) -> None:
    job = _job(tmp_path, "files_to_lake", cores_max=1, spark_conf={"spark.x": "y"})
    invocation = JobInvocation.run(job, secrets={"HUBFLOW_EVENTHUBS_CONNECTION_STRING": SECRET})

    command = invocation.command("local[2]", binary="spark-submit")

    assert command == [
        "spark-submit",
        "--master",
        "local[2]",
        "--conf",
        "spark.app.name=orders",
        "--conf",
        "spark.cores.max=1",
        "--conf",
        "spark.x=y",
        str(job.application_path()),
        ARG_CONFIG,
        str(job.config_path()),
    ]
    assert job.application_path().name == "files_to_lake.py"
    assert SECRET not in " ".join(command) and SECRET not in repr(invocation)
    assert invocation.secret_names == {"HUBFLOW_EVENTHUBS_CONNECTION_STRING"}
    env = invocation.environment({"PATH": "/bin", "TEAM_CS": "named", "AIRFLOW__CORE__FERNET_KEY": "x"})
    assert env["HUBFLOW_EVENTHUBS_CONNECTION_STRING"] == SECRET
    assert env["TEAM_CS"] == "named", "a variable the config names in a *_env key reaches the driver"
    assert "AIRFLOW__CORE__FERNET_KEY" not in env


def test_a_pipeline_run_names_its_function_and_a_config_given_replaces_the_registered_one(
    tmp_path: Path,
) -> None:
    job = _job(tmp_path, "hot_devices:transform")
    once = tmp_path / "once.yaml"
    invocation = JobInvocation.run(job, config=once, conf={"spark.extra": "1"})

    assert invocation.script.name == "pipeline.py"
    assert invocation.args == (ARG_CONFIG, str(once), ARG_PIPELINE, "hot_devices:transform")
    assert invocation.conf["spark.extra"] == "1" and invocation.conf["spark.app.name"] == "orders"
    parsed = pipeline_job.parse_args(invocation.args)
    assert (parsed.pipeline, parsed.config) == ("hot_devices:transform", str(once))


def test_the_entry_scripts_parse_what_the_invocations_render(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _job(tmp_path, "files_to_lake")
    assert runner.parse_args(JobInvocation.run(job).args, "a built-in").config == str(job.config_path())

    seen: dict[str, argparse.Namespace] = {}
    real_parse = argparse.ArgumentParser.parse_args

    def keep(parser: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> argparse.Namespace:
        parsed = real_parse(parser, args, namespace)
        seen[parser.description or ""] = parsed
        raise SystemExit(0)  # parsed: the entry script's work (Spark) is not this test's

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", keep)
    backfill = JobInvocation.backfill(job, "2026-11-25T10:00:00Z", "2026-11-25T11:00:00Z")
    assert backfill.script.name == "backfill.py"
    with pytest.raises(SystemExit):
        _entry_parser("backfill").main(list(backfill.args))
    parsed = seen["backfill one data interval of a job"]
    assert (parsed.application, parsed.config) == ("files_to_lake", str(job.config_path()))
    assert (parsed.window_start, parsed.window_end) == ("2026-11-25T10:00:00Z", "2026-11-25T11:00:00Z")

    maintenance = JobInvocation.maintenance(
        job, vacuum_retention_hours=36.5, checkpoint_after_commits=7, dry_run=True
    )
    assert maintenance.script.name == "lake_maintenance.py"
    with pytest.raises(SystemExit):
        _entry_parser("lake_maintenance").main(list(maintenance.args))
    parsed = seen["compact, vacuum and checkpoint a job's Delta tables"]
    assert (parsed.application, parsed.config) == ("files_to_lake", str(job.config_path()))
    assert parsed.dry_run
    assert (parsed.vacuum_retention_hours, parsed.checkpoint_after_commits) == (36.5, 7)
