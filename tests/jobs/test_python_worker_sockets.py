"""A job's session talks to its Python workers over Unix domain sockets (``PYTHON_WORKER_CONF``).

Over loopback TCP each Python data source task and sink batch waited on Nagle's algorithm
(docs/benchmarks.md, "The 40 ms per Python task"). Real Spark in a child process: the session a job builds,
and a Python data source whose workers report how they were started.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

_PROBE = """
import json, sys
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from hubflow.config import JobConfig
from hubflow_jobs.runtime.session import build_session


class WorkerEnvironment(DataSource):
    @classmethod
    def name(cls):
        return "worker_environment"

    def schema(self):
        return "task int, unix_sockets string"

    def reader(self, schema):
        return Reader()


class Reader(DataSourceReader):
    def partitions(self):
        return [InputPartition(n) for n in range(2)]

    def read(self, partition):
        import os

        yield (partition.value, os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "unset").lower())


config = JobConfig.model_validate({
    "name": "probe",
    "trigger": {"availableNow": True},
    "checkpoint_root": sys.argv[1],
    "status_root": sys.argv[1],
    "spark_conf": json.loads(sys.argv[2]),
})
spark = build_session(config)
spark.dataSource.register(WorkerEnvironment)
rows = spark.read.format("worker_environment").load().collect()
print(json.dumps({
    "conf": spark.conf.get("spark.python.unix.domain.socket.enabled", "unset"),
    "workers": sorted([r.task, r.unix_sockets] for r in rows),
}))
spark.stop()
"""


def _probe(tmp_path: Path, spark_conf: dict[str, str]) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", _PROBE, str(tmp_path), json.dumps({"spark.master": "local[2]", **spark_conf})],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_jobs_python_workers_use_unix_domain_sockets(tmp_path: Path) -> None:
    probe = _probe(tmp_path, {})
    assert probe == {"conf": "true", "workers": [[0, "true"], [1, "true"]]}
