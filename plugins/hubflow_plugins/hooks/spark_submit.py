"""spark-submit for registered jobs, through the Spark provider's SparkSubmitHook.

The hook owns the ``spark_default`` connection (master, deploy mode, binary) and builds the
command line; this module adds what hubflow jobs need: the job's ``--config``, the interpreter
Spark's Python workers must use, secrets passed in the driver's environment only (never on the
command line, so never in ``ps``, a log or the Spark UI), a driver environment without the
worker's Airflow settings (:func:`~hubflow_plugins.core.spark_submit_command.driver_environment`),
and a detached launch for long-running streaming jobs whose driver must outlive the Airflow task
that started it.

The provider's own ``env_vars`` is not used: on YARN and Kubernetes it turns each variable into a
``--conf`` (``spark.yarn.appMasterEnv.*``, ``spark.kubernetes.driverEnv.*``) on the command line,
and elsewhere it adds them to the worker's whole environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from hubflow_jobs.runtime.detached_process import start_detached
from hubflow_plugins.core.registry import RegisteredJob
from hubflow_plugins.core.spark_submit_command import (
    config_variables,
    driver_environment,
    job_environment,
    spark_submit_binary,
)

#: The environment variable through which a job receives the Event Hubs connection string.
EVENTHUBS_CONNECTION_STRING_ENV = "HUBFLOW_EVENTHUBS_CONNECTION_STRING"


class JobSubmitHook(SparkSubmitHook):
    """SparkSubmitHook that gives spark-submit the job's environment only, and can also start it in
    its own session and return at once."""

    def __init__(
        self, *, job_env: dict[str, str], named_variables: set[str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self._job_env = job_env
        self._named_variables = frozenset(named_variables or ())

    def driver_env(self) -> dict[str, str]:
        """spark-submit's whole environment: what the job keeps of this process's, and its own."""
        return driver_environment(os.environ, self._job_env, self._named_variables)

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        """The provider's submit, in :meth:`driver_env` (the provider passes ``env`` on to Popen)."""
        kwargs.setdefault("env", self.driver_env())
        return super().submit(application, **kwargs)

    @property
    def returncode(self) -> int | None:
        """spark-submit's exit code once :meth:`submit` has waited for it, else ``None``.

        ``submit`` raises ``AirflowException`` for any nonzero code with the code only in its text;
        the job's exit code (``hubflow_jobs``) decides whether the run is worth a retry.
        """
        process = getattr(self, "_submit_sp", None)
        return process.returncode if process is not None else None

    def launch_detached(
        self, application: str, log_path: Path, ship_to: str | None = None
    ) -> subprocess.Popen:
        """Start spark-submit for ``application`` without waiting; its output goes to ``log_path``.

        The process gets a session of its own, so it survives the end of the Airflow task; the
        job's status folder (heartbeat, pid) is how supervisors follow it afterwards. With
        ``ship_to`` (a remote status folder) spark-submit runs under ``hubflow_jobs.runtime.driver_log``,
        which copies ``log_path`` into that folder's ``driver.log`` while the driver runs and when
        it ends.
        """
        command = self._build_spark_submit_command(application)
        if ship_to:
            command = [
                sys.executable,
                "-m",
                "hubflow_jobs.runtime.driver_log",
                "--status-dir",
                ship_to,
                "--local-log",
                str(log_path),
                "--",
                *command,
            ]
        return start_detached(command, log_path, self.driver_env())


def driver_secrets(job: RegisteredJob) -> dict[str, str]:
    """The secret environment for the job's driver: the Event Hubs connection string (and an Entra ID
    connection's ``AZURE_*`` identity) and the storage access (``HUBFLOW_AZURE_STORAGE``, from
    ``storage_conn_id``), those the job names."""
    from hubflow_plugins.hooks.azure_storage import job_storage_env

    secrets = job_storage_env(job)
    if job.eventhubs_conn_id:
        from hubflow_plugins.hooks.eventhubs import EventHubsHook

        eventhubs = EventHubsHook(job.eventhubs_conn_id)
        secrets[EVENTHUBS_CONNECTION_STRING_ENV] = eventhubs.connection_string()
        secrets.update(eventhubs.credential_environment())  # an Entra ID service principal's, if any
    return secrets


def build_submit_hook(
    job: RegisteredJob,
    *,
    secrets: dict[str, str] | None = None,
    extra_args: list[str] | None = None,
    conf: dict[str, str] | None = None,
) -> JobSubmitHook:
    """A hook that submits ``job`` with its config, conf overrides (the registry's, then ``conf``)
    and secret environment.

    The Spark connection must exist: the provider would otherwise fall back to ``--master yarn``,
    which fails later with a message about HADOOP_CONF_DIR that hides the real cause. A job with
    secrets needs a driver started here (deploy mode client): a driver started by the cluster gets
    environment variables only through spark-submit's command line.
    """
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        BaseHook.get_connection(job.spark_conn_id)
    except AirflowNotFoundException:
        raise AirflowNotFoundException(
            f"job {job.name}: the Airflow connection {job.spark_conn_id!r} does not exist. Create it with "
            'the Spark master in its host, e.g. AIRFLOW_CONN_SPARK_DEFAULT=\'{"conn_type": "spark", '
            '"host": "local[*]"}\' or `airflow connections add spark_default --conn-type spark '
            "--conn-host spark://HOST:7077`"
        ) from None
    kwargs: dict[str, Any] = {
        "conn_id": job.spark_conn_id,
        "conf": {**job.submit_conf, **(conf or {})},
        "name": job.name,
        "application_args": ["--config", str(job.config_path()), *(extra_args or [])],
    }
    binary = spark_submit_binary()
    if binary:
        kwargs["spark_binary"] = binary
    hook = JobSubmitHook(
        job_env=job_environment(secrets), named_variables=config_variables(job.config_path()), **kwargs
    )
    connection = hook._connection
    if secrets and connection.get("deploy_mode") == "cluster":
        raise ValueError(
            f"job {job.name}: the Airflow connection {job.spark_conn_id!r} runs the driver in deploy mode "
            f"cluster (master {connection.get('master')}), where its secret ({', '.join(sorted(secrets))}) "
            "could reach the driver only on spark-submit's command line, visible in ps and the "
            "cluster's UI. Set the connection's deploy mode to client (the driver then runs on the "
            "Airflow worker and gets the secret in its environment)"
        )
    return hook
