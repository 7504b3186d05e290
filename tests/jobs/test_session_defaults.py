"""What a job's session sets for every job: Python workers on Unix domain sockets
(``PYTHON_WORKER_CONF``) and checkpoints written through Hadoop's FileSystem API (``CHECKPOINT_CONF``).

Over loopback TCP each Python data source task and sink batch waited on Nagle's algorithm; Spark's
default checkpoint manager starts ``readlink`` processes for every checkpoint file (docs/benchmarks.md,
"The 40 ms per Python task" and "Checkpoint commits"). Real Spark in one child process: the session a
job builds, a Python data source whose workers report how they were started, and a stream that stops
and continues from its checkpoint.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hubflow_jobs.runtime.session import CHECKPOINT_CONF

pytestmark = pytest.mark.integration

_PROBE = """
import json, os, sys
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
        yield (partition.value, os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "unset").lower())


folder = sys.argv[1]
config = JobConfig.model_validate({
    "name": "probe",
    "trigger": {"availableNow": True},
    "checkpoint_root": folder,
    "status_root": folder,
    "spark_conf": json.loads(sys.argv[2]),
})
spark = build_session(config)
spark.dataSource.register(WorkerEnvironment)
rows = spark.read.format("worker_environment").load().collect()

# A stream that stops and continues from its checkpoint: each file's rows once, in two runs.
incoming, checkpoint, output = (os.path.join(folder, name) for name in ("in", "checkpoint", "out"))
os.makedirs(incoming)
for run in range(2):
    with open(os.path.join(incoming, f"{run}.json"), "w") as handle:
        handle.writelines(json.dumps({"n": run * 10 + n}) + "\\n" for n in range(10))
    query = (
        spark.readStream.schema("n int").json(incoming)
        .writeStream.format("parquet").option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start(output)
    )
    query.awaitTermination()
print(json.dumps({
    "conf": spark.conf.get("spark.python.unix.domain.socket.enabled", "unset"),
    "workers": sorted([r.task, r.unix_sockets] for r in rows),
    "checkpoint_manager": spark.conf.get("spark.sql.streaming.checkpointFileManagerClass", "unset"),
    "streamed": sorted(r.n for r in spark.read.parquet(output).collect()),
    "logs": {log: sorted(os.listdir(os.path.join(checkpoint, log))) for log in ("offsets", "commits")},
}))
spark.stop()
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """What the session of a job with no ``spark_conf`` of its own did, from one child process."""
    folder = tmp_path_factory.mktemp("session")
    run = subprocess.run(
        [sys.executable, "-c", _PROBE, str(folder), json.dumps({"spark.master": "local[2]"})],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_jobs_python_workers_use_unix_domain_sockets(probe: dict) -> None:
    assert (probe["conf"], probe["workers"]) == ("true", [[0, "true"], [1, "true"]])


def test_a_jobs_checkpoints_go_through_the_filesystem_manager_and_resume(probe: dict) -> None:
    assert probe["checkpoint_manager"] == CHECKPOINT_CONF["spark.sql.streaming.checkpointFileManagerClass"]
    assert probe["streamed"] == list(range(20))  # every row once across the stop and the restart
    # each batch's file renamed into place with its checksum file, no temporary file left
    assert probe["logs"] == {log: [".0.crc", ".1.crc", "0", "1"] for log in ("offsets", "commits")}
