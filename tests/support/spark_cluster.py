"""A Spark standalone cluster (one master, one worker or more) on loopback, from pyspark's own spark-class."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .processes import free_port, start_background, stop_process, wait_until


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def spark_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment every Spark process of the tests runs with."""
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": spark_home(),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_NO_DAEMONIZE": "1",
        }
    )
    env.update(extra or {})
    return env


@dataclass
class StandaloneCluster:
    """A running master and worker; ``master_url`` is what spark-submit's ``--master`` takes."""

    master_url: str
    master_ui: str
    work_dir: Path
    processes: list[subprocess.Popen] = field(default_factory=list)

    def status(self) -> dict:
        """The master's state as JSON.

        Raises ``OSError`` while nothing answers and ``ValueError`` while the answer is not JSON: the
        master's Jetty starts before its handlers are attached, so for a moment the root page's HTML
        answers ``/json/`` (seen on a loaded CI machine). Callers polling for readiness treat both as
        "not yet".
        """
        with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=5) as resp:
            return json.load(resp)

    def stop(self) -> None:
        for proc in reversed(self.processes):
            stop_process(proc)


def start_cluster(
    work_dir: Path,
    worker_cores: int = 1,
    worker_memory: str = "1g",
    auth_secret: str | None = None,
    workers: int = 1,
) -> StandaloneCluster:
    """Start a master and ``workers`` workers bound to 127.0.0.1 and wait until they are registered.

    With ``auth_secret`` both run with ``spark.authenticate`` and that secret in Spark's variable
    ``_SPARK_AUTH_SECRET``, as the compose stack's do: only drivers that hold it can register.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    spark_class = os.path.join(spark_home(), "bin", "spark-class")
    extra = {"SPARK_LOG_DIR": str(work_dir), "SPARK_WORKER_DIR": str(work_dir / "worker")}
    if auth_secret is not None:
        extra |= {
            "_SPARK_AUTH_SECRET": auth_secret,
            "SPARK_MASTER_OPTS": "-Dspark.authenticate=true",
            "SPARK_WORKER_OPTS": "-Dspark.authenticate=true",
        }
    env = spark_env(extra)
    port, ui_port = free_port(), free_port()
    master = start_background(
        [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui_port),
        ],
        work_dir / "master.log",
        env,
    )
    cluster = StandaloneCluster(
        master_url=f"spark://127.0.0.1:{port}",
        master_ui=f"http://127.0.0.1:{ui_port}",
        work_dir=work_dir,
        processes=[master],
    )
    try:
        wait_until(lambda: _answers(cluster), 60, "the Spark master's web UI")
        for number in range(workers):
            name = "worker" if number == 0 else f"worker{number + 1}"
            worker = start_background(
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(worker_cores),
                    "--memory",
                    worker_memory,
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(work_dir / name),
                    cluster.master_url,
                ],
                work_dir / f"{name}.log",
                env,
            )
            cluster.processes.append(worker)
        wait_until(
            lambda: _alive_workers(cluster) >= workers, 60, "the Spark workers to register with the master"
        )
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _answers(cluster: StandaloneCluster) -> bool:
    """True once the master answers ``/json/`` with JSON and has become the ALIVE leader."""
    try:
        return cluster.status().get("status") == "ALIVE"
    except (OSError, ValueError):
        return False


def _alive_workers(cluster: StandaloneCluster) -> int:
    try:
        return sum(1 for w in cluster.status().get("workers", []) if w.get("state") == "ALIVE")
    except (OSError, ValueError):
        return 0
