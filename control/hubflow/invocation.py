"""One spark-submit call of a registered job (:class:`JobInvocation`), and its driver's environment.

The one owner of a job's command line: the entry script, its arguments (``ARG_*``, which the entry
scripts' parsers take by the same names), the Spark conf and the driver's environment, built from
the registry entry here and rendered by the Airflow hook (``hooks/spark_submit.py``) and by the
``hubflow run`` and ``hubflow backfill`` commands. Airflow-free.

A driver started by an Airflow worker gets only what a job can need of the worker's environment
(:func:`driver_environment`): the system's basics, Java, Spark, Hadoop, Python, Azure identity and
hubflow's own variables, and every variable its config names in a ``*_env`` key. The worker's
Airflow settings (``AIRFLOW_CONN_*``, ``AIRFLOW_VAR_*``, any secret of Airflow's a worker may hold)
and anything else stay behind: spark-submit, the driver and every Python worker it starts would
otherwise hold them (docs/airflow.md, "The driver's environment"). A config may not name Airflow's
variables or the platform's secrets (:mod:`hubflow.platform_secrets`, which ``load_config``
applies); an invocation of such a config is refused again here.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from hubflow.config import ConfigError
from hubflow.platform_secrets import PLATFORM_SECRETS, env_keys, refused_env_keys, refused_variable
from hubflow.spark_auth import SPARK_AUTH_SECRET_ENV

if TYPE_CHECKING:
    from hubflow.registry import RegisteredJob

#: The arguments of the entry scripts (``jobs/*.py``): what an invocation renders, what they parse.
ARG_CONFIG = "--config"
ARG_PIPELINE = "--pipeline"
ARG_APPLICATION = "--application"
ARG_WINDOW_START = "--window-start"
ARG_WINDOW_END = "--window-end"
ARG_DRY_RUN = "--dry-run"
ARG_VACUUM_RETENTION_HOURS = "--vacuum-retention-hours"
ARG_CHECKPOINT_AFTER_COMMITS = "--checkpoint-after-commits"
#: The entry scripts beside a job's own (``jobs/<application>.py``, ``jobs/pipeline.py``).
BACKFILL_SCRIPT = "backfill.py"
MAINTENANCE_SCRIPT = "lake_maintenance.py"

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
    return {value for _, value in env_keys(_yaml_of(Path(config_path)))}


def inherited(name: str) -> bool:
    """Whether a driver keeps the parent's variable ``name`` (:data:`INHERITED_NAMES`, ``..._PREFIXES``;
    never one of the platform's secrets under a kept prefix, such as ``HUBFLOW_JWT_SECRET``)."""
    if name in INHERITED_NAMES:
        return True
    return name.startswith(INHERITED_PREFIXES) and name not in PLATFORM_SECRETS


def driver_environment(
    parent: Mapping[str, str], job_env: Mapping[str, str], named: set[str] | frozenset[str] = frozenset()
) -> dict[str, str]:
    """The whole environment of a job's spark-submit: what it keeps of ``parent`` (:func:`inherited`,
    and the variables in ``named``, those its config names, but never Airflow's variables or the
    platform's secrets), then ``job_env`` (:func:`job_environment`)."""
    env = {
        name: value
        for name, value in parent.items()
        if inherited(name) or (name in named and refused_variable(name) is None)
    }
    env.update(job_env)
    return env


@dataclass(frozen=True)
class JobInvocation:
    """One spark-submit call of a job: entry script, its arguments, Spark conf, driver environment.

    Build it with :meth:`run`, :meth:`backfill` or :meth:`maintenance`; render it with
    :meth:`command` (a command line for a master) or hand its parts to Spark's submit hook. The
    job's secrets are in ``job_env`` only: they reach the driver's environment (:meth:`environment`),
    never the command line, and are left out of ``repr``.
    """

    name: str
    script: Path
    args: tuple[str, ...]
    conf: Mapping[str, str]
    job_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    named_variables: frozenset[str] = frozenset()
    #: The names of the secrets in ``job_env`` (for messages; their values never leave ``job_env``).
    secret_names: frozenset[str] = frozenset()

    @classmethod
    def run(
        cls,
        job: RegisteredJob,
        *,
        secrets: Mapping[str, str] | None = None,
        conf: Mapping[str, str] | None = None,
        config: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> JobInvocation:
        """A run of the job: ``jobs/<application>.py --config FILE`` (``jobs/pipeline.py --config FILE
        --pipeline module:function`` for a pipeline); ``config`` replaces the registered file (an
        earlier version's deployed copy) and ``env`` adds variables (not secrets) for the driver."""
        pipeline = (ARG_PIPELINE, job.application) if job.is_pipeline else ()
        return cls._of(
            job, job.application_path(), pipeline, secrets=secrets, conf=conf, config=config, env=env
        )

    @classmethod
    def backfill(
        cls,
        job: RegisteredJob,
        start: str,
        end: str,
        *,
        secrets: Mapping[str, str] | None = None,
        conf: Mapping[str, str] | None = None,
    ) -> JobInvocation:
        """A backfill of ``[start, end)``: ``jobs/backfill.py --config FILE --application APP
        --window-start START --window-end END``."""
        args = (ARG_APPLICATION, job.application, ARG_WINDOW_START, start, ARG_WINDOW_END, end)
        script = job.application_path().with_name(BACKFILL_SCRIPT)
        return cls._of(job, script, args, secrets=secrets, conf=conf)

    @classmethod
    def maintenance(
        cls,
        job: RegisteredJob,
        *,
        vacuum_retention_hours: float,
        checkpoint_after_commits: int,
        dry_run: bool,
        secrets: Mapping[str, str] | None = None,
    ) -> JobInvocation:
        """Maintenance of the job's Delta tables: ``jobs/lake_maintenance.py --config FILE
        --application APP --vacuum-retention-hours H --checkpoint-after-commits N [--dry-run]``."""
        args = (
            ARG_APPLICATION,
            job.application,
            ARG_VACUUM_RETENTION_HOURS,
            f"{vacuum_retention_hours:g}",
            ARG_CHECKPOINT_AFTER_COMMITS,
            str(checkpoint_after_commits),
            *((ARG_DRY_RUN,) if dry_run else ()),
        )
        script = job.application_path().with_name(MAINTENANCE_SCRIPT)
        return cls._of(job, script, args, secrets=secrets)

    @classmethod
    def _of(
        cls,
        job: RegisteredJob,
        script: Path,
        args: tuple[str, ...],
        *,
        secrets: Mapping[str, str] | None = None,
        conf: Mapping[str, str] | None = None,
        config: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> JobInvocation:
        config = config or job.config_path()
        refused = refused_env_keys(_yaml_of(config))
        if refused:  # load_config refuses it too; a driver must never get these, whoever built the call
            raise ConfigError(f"job {job.name}: jobs config error: " + "; ".join(refused))
        return cls(
            name=job.name,
            script=script,
            args=(ARG_CONFIG, str(config), *args),
            conf={**job_conf(job), **(conf or {})},
            job_env=job_environment({**(env or {}), **(secrets or {})}),
            named_variables=frozenset(config_variables(config)),
            secret_names=frozenset(secrets or ()),
        )

    def conf_args(self) -> list[str]:
        """The Spark conf as spark-submit's ``--conf key=value`` pairs."""
        return [part for key, value in self.conf.items() for part in ("--conf", f"{key}={value}")]

    def command(self, master: str, binary: str | None = None) -> list[str]:
        """The whole command line for ``master``: ``spark-submit --master M --conf ... SCRIPT ARGS``."""
        spark_submit = binary or spark_submit_binary() or "spark-submit"
        return [spark_submit, "--master", master, *self.conf_args(), str(self.script), *self.args]

    def environment(self, parent: Mapping[str, str]) -> dict[str, str]:
        """spark-submit's whole environment: what it keeps of ``parent``, then the job's own."""
        return driver_environment(parent, self.job_env, self.named_variables)


def _yaml_of(config_path: Path) -> Any:
    """A config's parsed YAML, or None when it cannot be read (the job itself reports that)."""
    try:
        return yaml.safe_load(Path(config_path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None


def job_conf(job: RegisteredJob) -> dict[str, str]:
    """The Spark conf every call of ``job`` gets: app name, core cap, the registry's ``spark_conf``."""
    return {"spark.app.name": job.name, "spark.cores.max": str(job.cores_max), **job.spark_conf}
