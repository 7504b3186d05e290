"""The streaming read on the loopback standalone cluster (executors in separate processes).

The package reaches the executors as spark-submit ``--py-files`` (a zip), and the driver finds
``format("eventhubs")`` by Spark's own auto-discovery: a plain copy of the package on the
driver's PYTHONPATH stands in for a pip-installed wheel (the project's editable install uses an
import hook that ``pkgutil.iter_modules`` cannot see). The event log is enabled so the test can
check that the connection string's key never reaches it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.spark_cluster import spark_env, spark_home

from .conftest import Hub

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

PACKAGE = Path(__file__).resolve().parents[2] / "connectors" / "pyspark_eventhubs"

JOB = """
import json, sys
from pyspark.sql import SparkSession

conn, ckpt, out, result, limit = sys.argv[1:6]
spark = SparkSession.builder.appName("eventhubs-cluster-test").getOrCreate()
query = (
    spark.readStream.format("eventhubs")
    .option("eventhubs.connectionString", conn)
    .option("eventhubs.startingPosition", '{"offset": "-1"}')
    .option("maxEventsPerTrigger", limit)
    .load()
    .writeStream.format("parquet")
    .option("path", out)
    .option("checkpointLocation", ckpt)
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()
sizes = [p["numInputRows"] for p in query.recentProgress]
rows = spark.read.parquet(out).selectExpr("cast(body as string) AS body", "partition").collect()
with open(result, "w") as f:
    json.dump({"sizes": sizes, "bodies": [r.body for r in rows]}, f)
spark.stop()
"""


def _zip_package(target: Path) -> Path:
    with zipfile.ZipFile(target, "w") as archive:
        for path in PACKAGE.rglob("*.py"):
            archive.write(path, f"pyspark_eventhubs/{path.relative_to(PACKAGE)}")
    return target


@pytest.mark.parametrize(
    ("limit", "sizes"),
    [
        ("1000", [180]),  # one micro-batch: the default run
        pytest.param("50", [50, 50, 50, 30], marks=pytest.mark.slow),  # several batches
    ],
)
def test_streaming_read_on_standalone_cluster(
    spark_cluster: Any, hub: Hub, tmp_path: Path, limit: str, sizes: list[int]
) -> None:
    sent = hub.send_per_partition({"0": 50, "1": 40, "2": 60, "3": 30})
    script = tmp_path / "job.py"
    script.write_text(JOB)
    events = tmp_path / "events"
    events.mkdir()
    result = tmp_path / "result.json"
    cmd = [
        os.path.join(spark_home(), "bin", "spark-submit"),
        "--master",
        spark_cluster.master_url,
        "--py-files",
        str(_zip_package(tmp_path / "pyspark_eventhubs.zip")),
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        f"spark.pyspark.python={sys.executable}",
        "--conf",
        "spark.eventLog.enabled=true",
        "--conf",
        "spark.eventLog.compress=false",
        "--conf",
        f"spark.eventLog.dir={events}",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        str(script),
        hub.connection_string,
        str(tmp_path / "ckpt"),
        str(tmp_path / "out"),
        str(result),
        limit,
    ]
    site = tmp_path / "site"
    shutil.copytree(PACKAGE, site / "pyspark_eventhubs")
    env = spark_env({"PYTHONPATH": str(site)})
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-4000:]
    outcome = json.loads(result.read_text())
    assert [s for s in outcome["sizes"] if s] == sizes
    assert len(outcome["bodies"]) == 180 and set(outcome["bodies"]) == sent
    log_text = "\n".join(p.read_text(errors="replace") for p in events.rglob("*") if p.is_file())
    assert "eventhubs" in log_text and "SAS_KEY_VALUE" not in log_text
    assert "SAS_KEY_VALUE" not in proc.stderr
