"""Which spark-submit runs a job and what its driver's environment holds; Airflow-free.

The one owner of both for the Spark hook (``hooks/spark_submit.py``) and the ``hubflow run`` command.

A driver started by an Airflow worker gets only what a job can need of the worker's environment
(:func:`driver_environment`): the system's basics, Java, Spark, Hadoop, Python, Azure identity and
hubflow's own variables, and every variable its config names in a ``*_env`` key. The worker's
Airflow settings (the API server's JWT secret, the metadata database URL, ``AIRFLOW_CONN_*``,
``AIRFLOW_VAR_*``) and anything else stay behind: spark-submit, the driver and every Python worker
it starts would otherwise hold them (docs/airflow.md, "The driver's environment").
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from hubflow_jobs.spark_auth import SPARK_AUTH_SECRET_ENV

#: Variables a driver keeps from its parent by exact name: the system's and the interpreter's.
INHERITED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "HOSTNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TERM",
        "LD_LIBRARY_PATH",
        "CLASSPATH",
        "KRB5CCNAME",
        "KRB5_CONFIG",
        "JAVA_HOME",
        "JAVA_TOOL_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "_JAVA_OPTIONS",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONUNBUFFERED",
        "PYTHONHASHSEED",
        "PYTHONDONTWRITEBYTECODE",
        "VIRTUAL_ENV",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        # Spark's RPC secret on a cluster with spark.authenticate (the compose stack's workers)
        SPARK_AUTH_SECRET_ENV,
    }
)
#: Variables a driver keeps by prefix: locale, Spark, Hadoop, hubflow's own, and Azure's identity
#: (DefaultAzureCredential's ``AZURE_*``, a managed identity's ``IDENTITY_*`` and ``MSI_*``).
INHERITED_PREFIXES = ("LC_", "SPARK_", "PYSPARK_", "HADOOP_", "HUBFLOW_", "AZURE_", "IDENTITY_", "MSI_")
#: The suffix of the config keys that name an environment variable (``connection_string_env``).
ENV_KEY_SUFFIX = "_env"


def spark_submit_binary() -> str | None:
    """The spark-submit beside this interpreter (a pip-installed pyspark), else the one on PATH."""
    beside = Path(sys.executable).parent / "spark-submit"
    if beside.exists():
        return str(beside)
    return shutil.which("spark-submit")


def job_environment(secrets: dict[str, str] | None = None) -> dict[str, str]:
    """What the job's driver needs besides its parent's environment: this interpreter for Spark's
    Python workers, the loopback address when one is set, and the job's secrets."""
    env = {
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
    }
    if os.environ.get("SPARK_LOCAL_IP"):
        env["SPARK_LOCAL_IP"] = os.environ["SPARK_LOCAL_IP"]
    env.update(secrets or {})
    return env


def config_variables(config_path: str | os.PathLike[str]) -> set[str]:
    """The environment variables a job's config names: the values of its ``*_env`` keys, at any depth.

    An unreadable or broken config names none (the job itself reports what is wrong with it).
    """
    try:
        data = yaml.safe_load(Path(config_path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return set()
    return set(_env_values(data))


def _env_values(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and key.endswith(ENV_KEY_SUFFIX) and isinstance(value, str):
                yield value
            else:
                yield from _env_values(value)
    elif isinstance(node, list):
        for item in node:
            yield from _env_values(item)


def inherited(name: str) -> bool:
    """Whether a driver keeps the parent's variable ``name`` (:data:`INHERITED_NAMES`, ``..._PREFIXES``)."""
    return name in INHERITED_NAMES or name.startswith(INHERITED_PREFIXES)


def driver_environment(
    parent: Mapping[str, str], job_env: Mapping[str, str], named: set[str] | frozenset[str] = frozenset()
) -> dict[str, str]:
    """The whole environment of a job's spark-submit: what it keeps of ``parent`` (:func:`inherited`,
    and the variables in ``named``, those its config names), then ``job_env`` (:func:`job_environment`)."""
    env = {name: value for name, value in parent.items() if inherited(name) or name in named}
    env.update(job_env)
    return env
