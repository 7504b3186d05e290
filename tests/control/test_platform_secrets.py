"""A job config's ``*_env`` keys cannot name Airflow's variables or the platform's secrets
(:mod:`hubflow.platform_secrets`): refused where configs load (so ``hubflow check`` and the driver
refuse them) and again where a driver's environment is built."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from hubflow.config import ConfigError, JobConfig, load_config
from hubflow.invocation import JobInvocation, driver_environment
from hubflow.platform_secrets import PLATFORM_SECRETS, refused_env_keys, refused_variable
from hubflow.registry import load_registry
from tests.dags.helpers import write_registry

REPO = Path(__file__).resolve().parents[2]


class TeamConfig(JobConfig):
    """A job config with a ``*_env`` key of its own."""

    team_env: str


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("AIRFLOW__API_AUTH__JWT_SECRET", "is one of Airflow's variables"),
        ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "is one of Airflow's variables"),
        ("AIRFLOW_CONN_EVENTHUBS_DEFAULT", "is one of Airflow's variables"),
        ("AIRFLOW_HOME", "is one of Airflow's variables"),
        ("HUBFLOW_JWT_SECRET", "is a secret of the platform"),
        ("HUBFLOW_FERNET_KEY", "is a secret of the platform"),
        ("HUBFLOW_POSTGRES_PASSWORD", "is a secret of the platform"),
        ("HUBFLOW_SPARK_AUTH_SECRET", "is a secret of the platform"),
        ("_SPARK_AUTH_SECRET", "is a secret of the platform"),
    ],
)
def test_airflows_variables_and_the_platforms_secrets_are_refused(name: str, said: str) -> None:
    reason = refused_variable(name)
    assert reason is not None and reason.startswith(f"{name} {said}")
    assert "export the value the job needs under a name of your own" in reason


@pytest.mark.parametrize(
    "name",
    ["TELEMETRY_EVENTHUBS_CONNECTION", "HUBFLOW_EVENTHUBS_CONNECTION_STRING", "MY_AIRFLOW_X", "AIRFLOWX"],
)
def test_a_jobs_own_variables_are_not_refused(name: str) -> None:
    assert refused_variable(name) is None


def test_the_platform_secrets_are_the_ones_stack_sh_generates() -> None:
    """One list in Python; scripts/stack.sh's SECRET_NAMES (bash) must name the same secrets."""
    script = (REPO / "scripts" / "stack.sh").read_text(encoding="utf-8")
    names = set(re.search(r"^SECRET_NAMES=\(([^)]*)\)", script, re.M).group(1).split())
    assert names == {name for name in PLATFORM_SECRETS if name.startswith("HUBFLOW_")}


def test_refused_keys_are_named_as_the_file_writes_them_at_any_depth() -> None:
    data = {
        "source": {"connection_string_env": "AIRFLOW__CORE__FERNET_KEY"},
        "sources": {"telemetry": {"connection_string_env": "TELEMETRY_CS"}},
        "sinks": [{"token_env": "HUBFLOW_JWT_SECRET"}],
    }
    assert refused_env_keys(data) == [
        f"source.connection_string_env: {refused_variable('AIRFLOW__CORE__FERNET_KEY')}",
        f"sinks.0.token_env: {refused_variable('HUBFLOW_JWT_SECRET')}",
    ]


def _config(tmp_path: Path, **keys: object) -> Path:
    path = tmp_path / "orders.yaml"
    data = {"name": "orders", "trigger": {"availableNow": True}, "checkpoint_root": "/c", "status_root": "/s"}
    path.write_text(yaml.safe_dump({**data, **keys}), encoding="utf-8")
    return path


def test_load_config_refuses_a_config_that_names_one_whatever_else_it_holds(tmp_path: Path) -> None:
    config = _config(tmp_path, team_env="AIRFLOW__API_AUTH__JWT_SECRET")
    for check_environment in (True, False):
        with pytest.raises(ConfigError) as error:
            load_config(config, TeamConfig, check_environment=check_environment)
        assert str(error.value) == (
            "jobs config error: team_env: AIRFLOW__API_AUTH__JWT_SECRET is one of Airflow's variables, "
            "which no job may read (its drivers run the job's code); export the value the job needs "
            "under a name of your own and name that"
        )
    assert load_config(_config(tmp_path, team_env="TEAM_CS"), TeamConfig).name == "orders"


def test_an_invocation_of_such_a_config_is_refused_and_a_driver_never_gets_one(tmp_path: Path) -> None:
    config = _config(tmp_path, team_env="HUBFLOW_POSTGRES_PASSWORD")
    entry = {"name": "orders", "application": "files_to_lake", "config": str(config)}
    registry = write_registry(tmp_path, [{**entry, "mode": "scheduled", "schedule": "@hourly"}])
    job = load_registry(registry).job("orders")
    with pytest.raises(
        ConfigError, match=r"job orders: jobs config error: team_env: HUBFLOW_POSTGRES_PASSWORD"
    ):
        JobInvocation.run(job)

    parent = {
        "PATH": "/bin",
        "AIRFLOW__API_AUTH__JWT_SECRET": "jwt",
        "AIRFLOW__CORE__FERNET_KEY": "fernet",
        "HUBFLOW_JWT_SECRET": "jwt",
        "HUBFLOW_POSTGRES_PASSWORD": "db",
        "HUBFLOW_REGISTRY_OVERRIDES": "/o.yaml",
        "_SPARK_AUTH_SECRET": "spark",
        "TEAM_CS": "team",
    }
    named = frozenset({"AIRFLOW__API_AUTH__JWT_SECRET", "HUBFLOW_JWT_SECRET", "TEAM_CS"})
    env = driver_environment(parent, {}, named)
    # Spark's RPC secret is the platform's to give (a driver needs it to join the cluster), never a config's.
    assert env == {
        "PATH": "/bin",
        "HUBFLOW_REGISTRY_OVERRIDES": "/o.yaml",
        "_SPARK_AUTH_SECRET": "spark",
        "TEAM_CS": "team",
    }


def test_the_message_docs_pipelines_md_shows_is_the_one_a_config_gets() -> None:
    """docs/pipelines.md "Variables a job reads": its example error, word for word."""
    docs = (REPO / "docs" / "pipelines.md").read_text(encoding="utf-8")
    section = docs.split("**Variables a job reads (`*_env` keys).**", 1)[1]
    shown = " ".join(section.split("```", 2)[1].split())
    data = {"sources": {"telemetry": {"connection_string_env": "AIRFLOW__API_AUTH__JWT_SECRET"}}}
    assert shown == "jobs config error: " + "; ".join(refused_env_keys(data))
