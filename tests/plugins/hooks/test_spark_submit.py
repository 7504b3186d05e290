"""The spark-submit hook for registered jobs: the command a job gets, secrets only in the driver's
environment, that environment without the worker's Airflow settings (a real spark-submit's driver
reports what it sees), and clear errors for a missing Spark connection or a driver in the cluster."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowNotFoundException

from hubflow.invocation import JobInvocation
from hubflow.registry import load_registry
from hubflow.spark_auth import SPARK_AUTH_SECRET_ENV
from hubflow_plugins.hooks.spark_submit import EVENTHUBS_CONNECTION_STRING_ENV, build_submit_hook

pytestmark = pytest.mark.integration

SECRET = "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=NOT-IN-ANY-COMMAND="


def test_a_missing_spark_connection_is_named_with_how_to_create_it(registry: Path) -> None:
    job = load_registry().job("orders")
    with pytest.raises(
        AirflowNotFoundException, match="the Airflow connection 'spark_default' does not exist"
    ):
        build_submit_hook(job, JobInvocation.run(job))


def test_the_job_command_carries_its_config_and_conf_and_the_secret_only_its_environment(
    registry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    job = load_registry().job("orders")
    invocation = JobInvocation.run(job, secrets={EVENTHUBS_CONNECTION_STRING_ENV: SECRET})
    hook = build_submit_hook(job, invocation)

    command = hook.command()

    assert command[command.index("--master") + 1] == "local[2]"
    assert "spark.app.name=orders" in command and f"spark.cores.max={job.cores_max}" in command
    assert command[-3:] == [str(job.application_path()), "--config", str(job.config_path())]
    assert SECRET not in repr(invocation), "an invocation's repr (in a log) leaves its secrets out"
    assert not any("SharedAccessKey" in part for part in command), "a secret on the command line is in ps"
    assert hook.driver_env()[EVENTHUBS_CONNECTION_STRING_ENV] == SECRET
    assert hook.driver_env()["PYSPARK_PYTHON"] == os.environ.get("PYSPARK_PYTHON", sys.executable)


#: A driver application that writes its environment (names and values) to the file in argv[1].
DUMP_ENVIRONMENT = """
import json, os, sys
with open(sys.argv[sys.argv.index("--out") + 1], "w") as out:
    json.dump(dict(os.environ), out)
"""

#: What the Airflow worker's environment holds that no driver needs (deploy/airflow: compose).
WORKER_ONLY = {
    "AIRFLOW__API_AUTH__JWT_SECRET": "jwt-secret-of-the-api-server",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql+psycopg2://airflow:db-password@postgres/airflow",
    "AIRFLOW_CONN_WAREHOUSE": "postgres://u:warehouse-password@db/x",
    "AIRFLOW_VAR_API_TOKEN": "token-of-another-team",
    "UNRELATED_TOOL_TOKEN": "not-for-spark",
}


def _job_with_named_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A registry of one job whose config names ``TEAM_TELEMETRY_CONNECTION`` in a ``*_env`` key."""
    config = tmp_path / "envcheck.yaml"
    config.write_text(
        "name: envcheck\n"
        "sources:\n"
        "  events: {kind: eventhubs, connection_string_env: TEAM_TELEMETRY_CONNECTION}\n"
        "sinks:\n"
        f"  out: {{kind: delta, output_path: {tmp_path / 'out'}}}\n"
    )
    registry = tmp_path / "registry.yaml"
    registry.write_text(
        "jobs:\n"
        "  - name: envcheck\n"
        "    application: envcheck:run\n"
        f"    config: {config}\n"
        "    mode: scheduled\n"
        "    schedule: '@hourly'\n"
    )
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(registry))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    return config


def test_the_driver_gets_the_jobs_variables_and_none_of_the_workers_airflow_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the provider's submit and the detached launch alike: a real spark-submit's driver sees
    its secret, the variable its config names, PATH and hubflow's own, and nothing of Airflow's."""
    _job_with_named_variable(tmp_path, monkeypatch)
    for name, value in WORKER_ONLY.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("TEAM_TELEMETRY_CONNECTION", "Endpoint=sb://team/;SharedAccessKey=named-in-config=")
    monkeypatch.setenv("HUBFLOW_AZURE_STORAGE", '{"account": "lake"}')
    monkeypatch.setenv(SPARK_AUTH_SECRET_ENV, "spark-rpc-secret-of-the-cluster")
    application = tmp_path / "dump_environment.py"
    application.write_text(DUMP_ENVIRONMENT)
    job = load_registry().job("envcheck")

    seen = {}
    for how in ("submit", "detached"):
        out = tmp_path / f"environment-{how}.json"
        invocation = JobInvocation.run(job, secrets={EVENTHUBS_CONNECTION_STRING_ENV: SECRET})
        invocation = replace(invocation, script=application, args=(*invocation.args, "--out", str(out)))
        hook = build_submit_hook(job, invocation)
        if how == "submit":
            hook.submit()
        else:
            process = hook.launch_detached(tmp_path / "detached.log")
            assert process.wait(timeout=300) == 0, (tmp_path / "detached.log").read_text()[-3000:]
        seen[how] = json.loads(out.read_text())

    for how, env in seen.items():
        leaked = sorted(set(WORKER_ONLY) & set(env))
        assert not leaked, f"{how}: the driver inherited the worker's {leaked}"
        assert env[EVENTHUBS_CONNECTION_STRING_ENV] == SECRET, how
        assert env["TEAM_TELEMETRY_CONNECTION"].startswith("Endpoint=sb://team/"), how
        assert env["HUBFLOW_AZURE_STORAGE"] == '{"account": "lake"}', how
        assert env[SPARK_AUTH_SECRET_ENV] == "spark-rpc-secret-of-the-cluster", how  # for a cluster
        assert env["PATH"] == os.environ["PATH"], how
        assert env["PYSPARK_PYTHON"] == os.environ.get("PYSPARK_PYTHON", sys.executable), how


def test_a_job_with_a_secret_refuses_a_connection_whose_driver_runs_in_the_cluster(
    registry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deploy mode cluster on YARN: the provider would put the secret on spark-submit's command line
    (spark.yarn.appMasterEnv.*), so the hook refuses before anything starts, saying what to change."""
    connection = {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(connection))
    job = load_registry().job("orders")
    refused = r"deploy mode cluster .* Set the connection's deploy mode to client"
    with pytest.raises(ValueError, match=refused):
        build_submit_hook(job, JobInvocation.run(job, secrets={EVENTHUBS_CONNECTION_STRING_ENV: SECRET}))
    no_secret = build_submit_hook(job, JobInvocation.run(job))
    assert no_secret._connection["deploy_mode"] == "cluster", "no secret: nothing to refuse"
