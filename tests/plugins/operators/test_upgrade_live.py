"""Upgrades of a streaming pipeline on real Spark, through the real operator (``ensure_running``, as
the supervisor runs it, no scheduler) with a real spark-submit on local[1]: a ``module:function``
pipeline reads JSON files from a landing folder into a Delta table.

A compatible change (a new transform of the same schema) is upgraded on the checkpoint; an
incompatible one (a second sink) is refused while the old driver keeps running; a broken version
(each batch fails) is rolled back: the checkpoint is restored, keeping the batch the broken version
planned, and the previous version, started from its deployed copy, runs that batch. The Delta
table then holds every landed record exactly once. Four driver starts in all: version 1, version
2, the broken version, version 2 again. The stand-in-driver test of every path is
tests/control/test_upgrade.py.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import threading
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from airflow.sdk.exceptions import AirflowFailException

from hubflow.repository import PIPELINES_DIR_ENV
from hubflow.status import StatusFolder
from hubflow.supervision.upgrades import deployed_file
from hubflow_plugins.operators.streaming_job import StreamingJobOperator
from tests.dags.helpers import pid_alive, write_registry
from tests.jobs.helpers import log_ids, write_json_landing_file
from tests.jobs.pipelines_support import query_id, recorded_batches
from tests.plugins.operators.test_restart_backoff import _local_spark
from tests.support.processes import wait_until

pytestmark = pytest.mark.integration

JOB = "orders"
MODULE = "orders_pipeline"
SHORT = 12
#: A driver's start on a loaded 2-core machine.
START_TIMEOUT = 300
#: How long landed records may take to reach the table (a batch every second once running).
LANDED_WITHIN = 240

VERSION_1 = '''
"""Version 1: each order as it landed."""


def orders(orders):
    return orders.select("id", "name")
'''

#: A different transform with the same schema: it resumes version 1's checkpoint.
VERSION_2 = '''
"""Version 2: names trimmed."""

from pyspark.sql import functions as F


def orders(orders):
    return orders.select("id", F.trim(F.col("name")).alias("name"))
'''

#: Reports running, then fails its first batch (the UDF raises for every row): the driver exits.
BROKEN = '''
"""A broken version: every batch fails."""

from pyspark.sql import functions as F
from pyspark.sql.types import StringType


@F.udf(StringType())
def broken(name):
    raise RuntimeError("this version is broken")


def orders(orders):
    return orders.select("id", broken(F.col("name")).alias("name"))
'''


def _supervise(action: str = "ensure_running") -> dict[str, Any]:
    context = {
        "dag_run": SimpleNamespace(run_type="scheduled", run_id="scheduled__1", triggering_user_name=None)
    }
    return StreamingJobOperator(
        task_id=action,
        job_name=JOB,
        action=action,
        start_timeout=timedelta(seconds=START_TIMEOUT),
        stop_wait=timedelta(seconds=90),
    ).execute(context)


def _config(base: Path, **more_sinks: Any) -> dict[str, Any]:
    return {
        "name": JOB,
        "trigger": {"processingTime": "1 second"},
        "checkpoint_root": str(base / "checkpoints"),
        "status_root": str(base / "status"),
        "spark_conf": {"spark.sql.shuffle.partitions": 1, "spark.ui.enabled": False},
        "runtime": {"heartbeat_interval": "1 second", "poll_interval": "200 ms"},
        "sources": {
            "orders": {
                "kind": "files",
                "path": str(base / "landing"),
                "format": "json",
                "schema": "id BIGINT, name STRING",
            }
        },
        "sinks": {"lake": {"kind": "delta", "output_path": str(base / "lake" / JOB)}, **more_sinks},
    }


def _write_config(base: Path, **more_sinks: Any) -> None:
    text = yaml.safe_dump(_config(base, **more_sinks), sort_keys=False)
    (base / f"{JOB}.yaml").write_text(text, encoding="utf-8")


def _registry(base: Path, **keys: Any) -> Path:
    entry = {
        "name": JOB,
        "application": f"{MODULE}:orders",
        "config": str(base / f"{JOB}.yaml"),
        "mode": "streaming",
        **keys,
    }
    return write_registry(base, [entry])


def _deploy(base: Path, source: str) -> None:
    (base / "pipelines" / f"{MODULE}.py").write_text(source.lstrip(), encoding="utf-8")


def _table_ids(spark: Any, base: Path) -> list[int]:
    """Every id in the Delta table, duplicates included ([] before its first commit)."""
    from pyspark.errors import AnalysisException

    try:
        frame = spark.read.format("delta").load(str(base / "lake" / JOB))
        return [row.id for row in frame.select("id").collect()]
    except AnalysisException:
        return []


def _landed(spark: Any, base: Path, ids: set[int], what: str) -> None:
    wait_until(lambda: ids <= set(_table_ids(spark, base)), LANDED_WITHIN, what, interval=2)


def set_up_job(base: Path, monkeypatch: pytest.MonkeyPatch, source: str, **registry: Any) -> StatusFolder:
    """The job under ``base`` running the pipeline module ``source``, spark-submit on local[1], and its
    status folder (``registry``: more keys of its registry entry)."""
    _local_spark(monkeypatch)
    (base / "landing").mkdir()
    (base / "pipelines").mkdir()
    monkeypatch.setenv(PIPELINES_DIR_ENV, str(base / "pipelines"))
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(_registry(base, **registry)))
    _deploy(base, source)
    _write_config(base)
    return StatusFolder(str(base / "status" / JOB))


def _kill_drivers(folder: StatusFolder) -> None:
    status = folder.status() or {}
    for pid in (status.get("jvm_pid"), status.get("pid")):
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.mark.timeout(2400)
def test_an_upgrade_a_refusal_and_a_rollback_keep_every_record_once_in_delta(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = set_up_job(tmp_path, monkeypatch, VERSION_1)
    landing = tmp_path / "landing"
    backups = tmp_path / "checkpoints" / "_backups" / JOB

    def state() -> dict[str, Any]:
        return folder.read_json("supervisor.json") or {}

    def pid() -> int:
        return folder.status()["pid"]

    v2 = ""
    try:
        # 1. Version 1 starts and lands file a.
        expected = write_json_landing_file(landing, "a.json", 0, good=20, bad=0)
        started = _supervise()
        assert any(line.startswith(f"started job {JOB}") for line in started["done"]), started
        v1 = state()["fingerprint"]["digest"]
        assert folder.exists(deployed_file(v1)), "each started version keeps a deployed copy"
        _landed(spark, tmp_path, expected, "file a in the table (version 1)")
        first_pid = pid()

        # 2. A compatible change: the next supervisor run upgrades, on the checkpoint.
        _deploy(tmp_path, VERSION_2)
        expected |= write_json_landing_file(landing, "b.json", 1000, good=20, bad=0)
        upgraded = _supervise()
        v2 = state()["fingerprint"]["digest"]
        assert v2 != v1
        done = upgraded["done"]
        assert f"upgrade job {JOB} from version {v1[:SHORT]} to {v2[:SHORT]} (last-state)" in done, done
        assert any("it resumes the checkpoint" in line for line in done), done
        # Ready by a commit of file b, or idle when version 1 read it before its stop (on probation).
        assert done[-1].startswith(
            f"job {JOB}: upgraded from version {v1[:SHORT]} to {v2[:SHORT]}; the new version is ready"
        ), done
        second_pid = pid()
        assert second_pid != first_pid and pid_alive(second_pid), "the new version runs in a new driver"
        assert not pid_alive(first_pid), "the old driver was stopped"
        [backup] = [p for p in backups.iterdir() if (p / "_hubflow_backup.json").exists()]
        assert (backup / "commits").is_dir(), "the backup is a copy of version 1's checkpoint"
        assert state()["upgrade"]["outcome"] == "ready"
        _landed(spark, tmp_path, expected, "file b in the table")
        # Version 2 commits a batch of its own: when version 1 read file b before its stop, version 2
        # was ready while idle and stays on probation until its first commit, and a version deployed
        # meanwhile waits for that instead of being checked (tests/control/test_upgrade.py).
        expected |= write_json_landing_file(landing, "b2.json", 1500, good=20, bad=0)
        _landed(spark, tmp_path, expected, "file b2 in the table (version 2's first batch)")
        before = state()["upgrade"].get("committed_before")
        wait_until(
            lambda: (log_ids(tmp_path / "checkpoints" / JOB / "commits") or [-1])[-1] > (before or -1),
            LANDED_WITHIN,
            "version 2's first batch in the checkpoint's commit log",
        )

        # 3. An incompatible change (a second sink) is refused; version 2 keeps running and landing.
        audit = tmp_path / "lake" / "audit"
        _write_config(tmp_path, audit={"kind": "delta", "output_path": str(audit)})
        with pytest.raises(AirflowFailException) as refused:
            _supervise()
        text = str(refused.value)
        assert f"sink audit (delta {audit}) added" in text, text
        assert "upgrade_mode: fresh" in text, text
        assert pid() == second_pid and pid_alive(second_pid), "the old driver keeps running"
        assert state()["upgrade"]["outcome"] == "refused"
        assert state()["fingerprint"]["digest"] == v2
        expected |= write_json_landing_file(landing, "c.json", 2000, good=20, bad=0)
        _landed(spark, tmp_path, expected, "file c in the table (version 2 still runs)")
        _write_config(tmp_path)  # reverted: version 2's files again
        assert _supervise()["done"] == ["already running; nothing to do"]

        # 4. A broken version: its batch fails, the driver exits, and it is rolled back at once.
        monkeypatch.setenv(
            "HUBFLOW_REGISTRY",
            str(_registry(tmp_path, max_upgrade_failures=1, ready_within="3 minutes")),
        )
        _deploy(tmp_path, BROKEN)
        # File d lands once version 2 is stopped and its checkpoint copied (the upgrade's record is
        # in progress), before the broken version starts: landed earlier, version 2 (a batch a
        # second) would read it first, and the broken version, with nothing to read, would report
        # idle, which counts as ready.
        landed_d: dict[str, set[int]] = {}

        def land_d_once_version_2_stopped() -> None:
            def upgrading() -> bool:
                record = state().get("upgrade") or {}
                return record.get("outcome") == "in-progress" and record.get("after") != v2

            wait_until(upgrading, 300, "the upgrade to the broken version in progress")
            landed_d["ids"] = write_json_landing_file(landing, "d.json", 3000, good=20, bad=0)

        lander = threading.Thread(target=land_d_once_version_2_stopped, daemon=True)
        lander.start()
        with pytest.raises(AirflowFailException) as rolled:  # a retry would only find version 2
            _supervise()
        lander.join(10)
        assert "ids" in landed_d, "file d landed during the upgrade"
        expected |= landed_d["ids"]
        record = state()["upgrade"]
        broken = record["after"]
        text = str(rolled.value)
        assert "rolled back because it failed 1 times" in text, text
        assert f"version {broken[:SHORT]} (new) and {v2[:SHORT]} (previous)" in text, text
        planned = re.search(r"kept the job's query batch (\d+)", text)
        assert planned, f"the batch the broken version planned is kept: {text}"
        assert record["outcome"] == "rolled-back" and record["before"] == v2
        assert record["failures"] == 1, "rolled back at its first death, not after ready_within"
        assert not pid_alive(second_pid)
        _landed(spark, tmp_path, expected, "file d in the table (version 2 ran its batch again)")

        # 5. Every record once; version 2 runs again, from its deployed copy.
        ids = _table_ids(spark, tmp_path)
        assert len(ids) == len(set(ids)), "a record was written twice"
        assert sorted(ids) == sorted(expected), "every landed record is in the table"
        checkpoint = tmp_path / "checkpoints" / JOB
        commits = log_ids(checkpoint / "commits")
        assert recorded_batches(tmp_path / "lake" / JOB, query_id(checkpoint)) == commits, (
            "each batch is one Delta commit"
        )
        assert commits[-1] == int(planned.group(1)), "version 2 ran the batch the broken version planned"
        after = state()
        assert after["upgrade"]["outcome"] == "rolled-back"
        assert after["fingerprint"]["digest"] == v2 and after["version"]["digest"] == v2
        driver = pid()
        assert pid_alive(driver) and driver != second_pid
        command = _cmdline(driver)
        assert f"/hubflow-version-{v2[:SHORT]}/" in command, f"not version 2's deployed copy: {command}"
        assert folder.status()["state"] in ("running", "idle")
    finally:
        try:
            _supervise("stop")
        finally:
            _kill_drivers(folder)
            if v2:  # the rollback's copy of version 2 (its digest is this test's own)
                for copy in Path(tempfile.gettempdir()).glob(f"hubflow-version-{v2[:SHORT]}"):
                    shutil.rmtree(copy, ignore_errors=True)
