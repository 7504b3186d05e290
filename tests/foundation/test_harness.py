"""The harness fixtures start real components: local Spark, a standalone cluster, an Airflow DB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.spark_cluster import spark_env, spark_home

pytestmark = pytest.mark.integration

EXECUTOR_PROBE = '''
import json, os, sys
from pyspark.sql import SparkSession

def jvm_ancestor(pid):
    """The command line of the nearest java process above pid: the JVM that started this worker."""
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().split(b"\\0")
        if os.path.basename(cmd[0].decode()) == "java":
            return " ".join(c.decode() for c in cmd)
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    return ""

spark = SparkSession.builder.appName(sys.argv[2]).getOrCreate()
rows = spark.sparkContext.parallelize(range(4), 4).map(lambda i: (i, jvm_ancestor(os.getpid()))).collect()
driver_jvm = jvm_ancestor(os.getpid())
with open(sys.argv[1], "w") as out:
    json.dump({"rows": rows, "driver_jvm": driver_jvm}, out)
spark.stop()
'''


def test_local_spark_session_runs_python_tasks(spark) -> None:
    df = spark.createDataFrame([(i, f"e{i}") for i in range(100)], "id long, name string")
    assert df.rdd.map(lambda r: r.id * 2).sum() == 9900
    assert spark.sparkContext.master == "local[2]"
    assert spark.conf.get("spark.ui.enabled") == "false"
    # The tests' drivers evaluate expressions interpreted (tests/conftest.py, TEST_SQL_OPTIONS).
    assert spark.conf.get("spark.sql.codegen.factoryMode") == "NO_CODEGEN"
    assert spark.conf.get("spark.sql.codegen.wholeStage") == "false"


@pytest.mark.cluster
def test_job_submitted_to_standalone_cluster_runs_in_the_workers_executor(spark_cluster, tmp_path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(EXECUTOR_PROBE)
    out = tmp_path / "out.json"
    spark_submit = os.path.join(spark_home(), "bin", "spark-submit")
    result = subprocess.run(
        [
            spark_submit,
            "--master",
            spark_cluster.master_url,
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            f"spark.pyspark.python={sys.executable}",
            str(script),
            str(out),
            "hubflow-probe",
        ],
        env=spark_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    probe = json.loads(out.read_text())
    assert len(probe["rows"]) == 4
    for _, jvm in probe["rows"]:
        assert "org.apache.spark.executor.CoarseGrainedExecutorBackend" in jvm, jvm
    assert "CoarseGrainedExecutorBackend" not in probe["driver_jvm"]
    # One snapshot of the master's state: the app moves from active to completed when the master
    # handles the driver's exit, possibly after spark-submit returned; two reads could straddle that.
    state = spark_cluster.status()
    apps = state["completedapps"] + state["activeapps"]
    assert any(app["name"] == "hubflow-probe" for app in apps)


def test_airflow_home_has_a_migrated_metadata_db(airflow_home) -> None:
    airflow = Path(sys.executable).parent / "airflow"
    result = subprocess.run(
        [str(airflow), "db", "check-migrations", "-t", "5"],
        env=airflow_home.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    from tests.support.airflow_db import postgres_reachable

    if postgres_reachable():
        assert airflow_home.sql_alchemy_conn.startswith("postgresql")
