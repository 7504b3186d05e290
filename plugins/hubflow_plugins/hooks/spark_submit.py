"""spark-submit for registered jobs, through the Spark provider's SparkSubmitHook.

The hook owns the ``spark_default`` connection (master, deploy mode, binary) and builds the
command line from a :class:`~hubflow.invocation.JobInvocation` (entry script, arguments, conf and
the driver's environment, built from the registry in the control plane). This module adds what
the Airflow side owns: the job's secrets from Airflow connections, passed in the driver's
environment only (never on the command line, so never in ``ps``, a log or the Spark UI), and a
detached launch for long-running streaming jobs whose driver must outlive the Airflow task that
started it.

The provider's own ``env_vars`` is not used: on YARN and Kubernetes it turns each variable into a
``--conf`` (``spark.yarn.appMasterEnv.*``, ``spark.kubernetes.driverEnv.*``) on the command line,
and elsewhere it adds them to the worker's whole environment.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from hubflow.invocation import JobInvocation, spark_submit_binary
from hubflow.registry import RegisteredJob
from hubflow.supervision.detached_process import shipping_log, start_detached

#: The environment variable through which a job receives the Event Hubs connection string.
EVENTHUBS_CONNECTION_STRING_ENV = "HUBFLOW_EVENTHUBS_CONNECTION_STRING"


class JobSubmitHook(SparkSubmitHook):
    """SparkSubmitHook that gives spark-submit the job's environment only, and can also start it in
    its own session and return at once."""

    def __init__(self, *, invocation: JobInvocation, **kwargs: Any) -> None:
        super().__init__(
            conf=dict(invocation.conf), name=invocation.name, application_args=list(invocation.args), **kwargs
        )
        self.invocation = invocation

    def driver_env(self) -> dict[str, str]:
        """spark-submit's whole environment: what the job keeps of this process's, and its own."""
        return self.invocation.environment(os.environ)

    def command(self) -> list[str]:
        """The whole spark-submit command line of the invocation, as the provider builds it."""
        return self._build_spark_submit_command(str(self.invocation.script))

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        """The provider's submit of the invocation's script, in :meth:`driver_env` (the provider
        passes ``env`` on to Popen)."""
        kwargs.setdefault("env", self.driver_env())
        return super().submit(application or str(self.invocation.script), **kwargs)

    @property
    def returncode(self) -> int | None:
        """spark-submit's exit code once :meth:`submit` has waited for it, else ``None``.

        ``submit`` raises ``AirflowException`` for any nonzero code with the code only in its text;
        the job's exit code (``hubflow_jobs``) decides whether the run is worth a retry.
        """
        process = getattr(self, "_submit_sp", None)
        return process.returncode if process is not None else None

    def launch_detached(self, log_path: Path, ship_to: str | None = None) -> subprocess.Popen:
        """Start the invocation's spark-submit without waiting; its output goes to ``log_path``.

        The process gets a session of its own, so it survives the end of the Airflow task; the
        job's status folder (heartbeat, pid) is how supervisors follow it afterwards. With
        ``ship_to`` (a remote status folder) spark-submit runs under ``hubflow_jobs.runtime.driver_log``,
        which copies ``log_path`` into that folder's ``driver.log`` while the driver runs and when
        it ends.
        """
        command = self.command()
        if ship_to:
            command = shipping_log(command, log_path, ship_to)
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


def build_submit_hook(job: RegisteredJob, invocation: JobInvocation) -> JobSubmitHook:
    """A hook that submits ``invocation`` (a call of ``job``) through the job's Spark connection.

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
    kwargs: dict[str, Any] = {"conn_id": job.spark_conn_id}
    binary = spark_submit_binary()
    if binary:
        kwargs["spark_binary"] = binary
    hook = JobSubmitHook(invocation=invocation, **kwargs)
    secrets = sorted(invocation.secret_names)
    connection = hook._connection
    if secrets and connection.get("deploy_mode") == "cluster":
        raise ValueError(
            f"job {job.name}: the Airflow connection {job.spark_conn_id!r} runs the driver in deploy mode "
            f"cluster (master {connection.get('master')}), where its secret ({', '.join(secrets)}) "
            "could reach the driver only on spark-submit's command line, visible in ps and the "
            "cluster's UI. Set the connection's deploy mode to client (the driver then runs on the "
            "Airflow worker and gets the secret in its environment)"
        )
    return hook
