"""The spark-submit hook for registered jobs, built in-process (nothing is submitted): the command a
job gets, secrets only in the environment, and a clear error when the Spark connection is missing."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowNotFoundException

from hubflow_plugins.core.registry import load_registry
from hubflow_plugins.hooks.spark_submit import EVENTHUBS_CONNECTION_STRING_ENV, build_submit_hook

pytestmark = pytest.mark.integration

SECRET = "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=NOT-IN-ANY-COMMAND="


def test_a_missing_spark_connection_is_named_with_how_to_create_it(registry: Path) -> None:
    job = load_registry().job("orders")
    with pytest.raises(
        AirflowNotFoundException, match="the Airflow connection 'spark_default' does not exist"
    ):
        build_submit_hook(job)


def test_the_job_command_carries_its_config_and_conf_and_the_secret_only_its_environment(
    registry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    job = load_registry().job("orders")
    hook = build_submit_hook(job, secrets={EVENTHUBS_CONNECTION_STRING_ENV: SECRET}, extra_args=["--dry-run"])

    command = hook._build_spark_submit_command(str(job.application_path()))

    assert command[command.index("--master") + 1] == "local[2]"
    assert "spark.app.name=orders" in command and f"spark.cores.max={job.cores_max}" in command
    assert command[-4:] == [str(job.application_path()), "--config", str(job.config_path()), "--dry-run"]
    assert not any("SharedAccessKey" in part for part in command), "a secret on the command line is in ps"
    assert hook._env[EVENTHUBS_CONNECTION_STRING_ENV] == SECRET
    assert hook._env["PYSPARK_PYTHON"] == os.environ.get("PYSPARK_PYTHON", sys.executable)
