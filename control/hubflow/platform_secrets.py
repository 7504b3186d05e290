"""The environment variables no job may read (Airflow's and the platform's secrets), and the
``*_env`` keys of a job config, which name the variables a job reads.

A job config's ``*_env`` keys name the variables its driver gets (:mod:`hubflow.invocation`); a
driver runs the job's own code, so a config that named ``AIRFLOW__API_AUTH__JWT_SECRET`` or the
stack's database password would hand it what mints admin tokens or owns the metadata DB. Such names
are refused where configs are validated (:func:`hubflow.config.load_config`, so ``hubflow check``
too) and again where a driver's environment is built. Airflow-free.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hubflow.spark_auth import SPARK_AUTH_SECRET_ENV

#: The suffix of the config keys that name an environment variable (``connection_string_env``).
ENV_KEY_SUFFIX = "_env"

#: Airflow's variables (``AIRFLOW__SECTION__KEY`` settings, ``AIRFLOW_CONN_*``, ``AIRFLOW_VAR_*``,
#: ``AIRFLOW_HOME``): every name that starts with it.
AIRFLOW_PREFIX = "AIRFLOW_"
#: The platform's secrets: the stack's, by the names scripts/stack.sh generates them under (its
#: ``SECRET_NAMES``; tests/control/test_platform_secrets.py keeps both lists equal), and Spark's own
#: name of its RPC secret, which a driver gets from the platform, never through a config.
PLATFORM_SECRETS = frozenset(
    {
        "HUBFLOW_JWT_SECRET",
        "HUBFLOW_FERNET_KEY",
        "HUBFLOW_POSTGRES_PASSWORD",
        "HUBFLOW_SPARK_AUTH_SECRET",
        SPARK_AUTH_SECRET_ENV,
    }
)


def refused_variable(name: str) -> str | None:
    """Why no job may name the variable ``name`` (a sentence saying what to do), or None."""
    if name.startswith(AIRFLOW_PREFIX):
        return (
            f"{name} is one of Airflow's variables, which no job may read (its drivers run the job's "
            "code); export the value the job needs under a name of your own and name that"
        )
    if name in PLATFORM_SECRETS:
        return (
            f"{name} is a secret of the platform, which no job may read; export the value the job "
            "needs under a name of your own and name that"
        )
    return None


def env_keys(node: Any, *where: str) -> Iterator[tuple[str, str]]:
    """Every ``*_env`` key of a config's parsed YAML with the variable it names, at any depth; the
    key as the file writes it (``sources.telemetry.connection_string_env``)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and key.endswith(ENV_KEY_SUFFIX) and isinstance(value, str):
                yield ".".join((*where, key)), value
            else:
                yield from env_keys(value, *where, str(key))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from env_keys(item, *where, str(index))


def refused_env_keys(data: Any) -> list[str]:
    """``key: why`` for every ``*_env`` key of a config's parsed YAML that names a variable no job
    may read (:func:`refused_variable`)."""
    return [f"{key}: {reason}" for key, name in env_keys(data) if (reason := refused_variable(name))]
