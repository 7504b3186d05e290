"""A job that cannot get executors on the loopback standalone cluster fails with a clear message.

Another application holds the cluster's only core, as an always-on streaming job would hold its
share; a scheduled run then gets no executor. Spark itself would wait forever ("Initial job has not
accepted any resources"); the runtime gives up after ``runtime.executor_wait`` and says what to check.
The failed run leaves its input where it was. (That a run with free cores passes the wait is shown
by every job run on the cluster, e.g. tests/jobs/test_cluster.py.)
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from hubflow.status.exit_codes import EXIT_FAILED
from hubflow_jobs.runtime.executors import needs_executors
from tests.support.processes import start_background, stop_process, wait_until
from tests.support.spark_cluster import spark_env

from .helpers import (
    FILES_TO_LAKE,
    JOBS_DIR,
    cluster_submit,
    landing_config,
    last_log_line,
    write_config,
    write_json_landing_file,
)

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

#: Holds the cluster's cores until the file ``argv[2]`` appears; ``argv[1]`` says it holds them.
CORE_HOLDER = """
import pathlib, sys, time
from pyspark.sql import SparkSession
from hubflow_jobs.runtime.executors import wait_for_executors
spark = SparkSession.builder.appName("core-holder").getOrCreate()
wait_for_executors(spark, "core-holder", 600)
pathlib.Path(sys.argv[1]).write_text("holding")
while not pathlib.Path(sys.argv[2]).exists():
    time.sleep(0.2)
spark.stop()
"""


def test_a_job_without_free_cores_fails_after_executor_wait(spark_cluster: Any, tmp_path: Path) -> None:
    env = spark_env({"PYTHONPATH": str(JOBS_DIR)})
    holder_script = tmp_path / "core_holder.py"
    holder_script.write_text(CORE_HOLDER, encoding="utf-8")
    holding, release = tmp_path / "holding", tmp_path / "release"
    holder = start_background(
        cluster_submit(spark_cluster.master_url, str(holder_script), str(holding), str(release)),
        tmp_path / "holder.log",
        env,
    )
    try:
        wait_until(lambda: holding.exists() or holder.poll() is not None, 300, "the core holder's executor")
        assert holding.exists(), (tmp_path / "holder.log").read_text(errors="replace")[-3000:]

        base = tmp_path / "data"
        config = write_config(
            tmp_path / "job.yaml",
            landing_config(base, runtime={"heartbeat_interval": "1 second", "executor_wait": "10 seconds"}),
        )
        write_json_landing_file(base / "landing", "a.json", 1, good=8, bad=1)
        job = cluster_submit(spark_cluster.master_url, str(FILES_TO_LAKE), "--config", str(config))

        blocked_log = tmp_path / "blocked.log"
        with open(blocked_log, "wb") as out:
            blocked = subprocess.run(job, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=300)
        last = last_log_line(blocked_log)
        assert blocked.returncode == EXIT_FAILED, last
        assert "got no executor from " + spark_cluster.master_url in last
        assert "within 10 s (runtime.executor_wait)" in last and "spark.cores.max=1" in last
        assert (base / "landing" / "a.json").exists()  # nothing read, nothing moved
        assert not (base / "lake" / "orders").exists()

        release.touch()
        assert holder.wait(timeout=120) == 0
    finally:
        release.touch()
        deadline = time.monotonic() + 30
        while holder.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        stop_process(holder)


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        ({"spark.master": "local[2]"}, False),
        ({"spark.master": "local-cluster[2,1,512]"}, True),
        ({"spark.master": "spark://master:7077"}, True),
        ({"spark.master": "yarn", "spark.dynamicAllocation.enabled": "true"}, False),
        (
            {
                "spark.master": "yarn",
                "spark.dynamicAllocation.enabled": "true",
                "spark.dynamicAllocation.minExecutors": "2",
            },
            True,
        ),
    ],
)
def test_which_applications_wait_for_executors(conf: dict[str, str], expected: bool) -> None:
    assert needs_executors(conf) is expected
