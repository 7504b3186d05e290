"""Spark RPC authentication on the loopback standalone cluster, as the compose stack runs it.

The master and worker run with ``spark.authenticate`` and the secret in Spark's variable
``_SPARK_AUTH_SECRET``. A job whose driver holds the same secret in that variable runs (the runtime
hands it to the driver's SparkConf, hubflow.spark_auth.auth_conf); a driver with another
secret, or with none, is refused with a message that says what to check, and reads nothing. The
secret is never written where a command line or a log would show it: not in the job's log, not in
the executor launch commands the worker records.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hubflow.spark_auth import SPARK_AUTH_SECRET_ENV
from hubflow.status.exit_codes import EXIT_FAILED, EXIT_OK
from tests.support.spark_cluster import StandaloneCluster, spark_env, start_cluster

from .helpers import (
    FILES_TO_LAKE,
    JOBS_DIR,
    cluster_submit,
    landing_config,
    last_log_line,
    read_lake,
    read_status,
    write_config,
    write_json_landing_file,
)

pytestmark = [pytest.mark.integration, pytest.mark.cluster]

SECRET = secrets.token_urlsafe(32)


@pytest.fixture(scope="module")
def authenticated_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("auth-cluster"), auth_secret=SECRET)
    yield cluster
    cluster.stop()


def _run_job(cluster: StandaloneCluster, tmp_path: Path, secret: str | None) -> tuple[int, Path, Path, set]:
    """files_to_lake through spark-submit with ``spark.authenticate`` on and ``secret`` in the
    driver's environment; (exit code, log, data folder, the ids written to landing)."""
    base = tmp_path / "data"
    config = write_config(tmp_path / "job.yaml", landing_config(base))
    ids = write_json_landing_file(base / "landing", "a.json", 1, good=12, bad=0)
    env = spark_env({"PYTHONPATH": str(JOBS_DIR)})
    env.pop(SPARK_AUTH_SECRET_ENV, None)
    if secret is not None:
        env[SPARK_AUTH_SECRET_ENV] = secret
    command = cluster_submit(
        cluster.master_url, "--conf", "spark.authenticate=true", str(FILES_TO_LAKE), "--config", str(config)
    )
    log = tmp_path / "job.log"
    with open(log, "wb") as out:
        result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=420)
    return result.returncode, log, base, ids


def _files_holding(folder: Path, text: str) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and text in p.read_text(errors="replace")]


def test_a_driver_with_the_clusters_secret_runs_and_the_secret_stays_off_logs_and_command_lines(
    spark: object, authenticated_cluster: StandaloneCluster, tmp_path: Path
) -> None:
    code, log, base, ids = _run_job(authenticated_cluster, tmp_path, SECRET)
    assert code == EXIT_OK, last_log_line(log)
    assert sorted(r["id"] for r in read_lake(spark, base / "lake" / "orders")) == sorted(ids)
    # The worker records each executor's launch command (work dir, stderr): Spark passes the secret
    # to executors through their environment only.
    launches = _files_holding(authenticated_cluster.work_dir, "Launch command")
    assert launches, "the worker recorded no executor launch command"
    assert not _files_holding(authenticated_cluster.work_dir, SECRET)
    assert SECRET not in log.read_text(errors="replace")


@pytest.mark.parametrize(
    ("secret", "expected"),
    [
        (
            "not-the-clusters-secret-" + "x" * 20,
            "was not accepted by the Spark master spark://127.0.0.1:",
        ),
        (None, "spark.authenticate is on and the driver has no secret"),
    ],
    ids=["wrong-secret", "no-secret"],
)
def test_a_driver_without_the_clusters_secret_is_refused_with_what_to_check(
    authenticated_cluster: StandaloneCluster, tmp_path: Path, secret: str | None, expected: str
) -> None:
    code, log, base, _ids = _run_job(authenticated_cluster, tmp_path, secret)
    last = last_log_line(log)
    assert code == EXIT_FAILED, last
    # The reason where the operator and `hubflow run` read it (status.json), and as the last line
    # the job logged (Spark's shutdown hooks may still write after it).
    status = read_status(base)
    assert status["exit_code"] == EXIT_FAILED, status
    reason = status["outcome"]
    assert expected in reason and SPARK_AUTH_SECRET_ENV in reason, reason
    assert reason in last, last
    assert (base / "landing" / "a.json").exists()  # nothing read, nothing moved
    assert not (base / "lake").exists()
    assert SECRET not in log.read_text(errors="replace")
