"""A ``last-state`` upgrade of a stateful pipeline whose new version changes its state schema, on real
Spark through the real operator (``ensure_running``, as the supervisor runs it) with spark-submit on
local[1]: the plan check passes (same sources and sinks), Spark's state schema check
(``spark.sql.streaming.stateStore.stateSchemaCheck``, on by default) fails the new version's first
batch, and the upgrade is rolled back (docs/operations.md, "Upgrades"): the message names the state
schema that changed, the checkpoint is restored with the batch the new version planned, and the
previous version runs it, so every landed record is in the table once. Three driver starts: version
1, the new version, version 1 again.

The same change deployed while no data arrives: the new version has no batch to plan, reports idle
and is ready on probation; data then fails its first batch, and the next supervisor run judges the
upgrade again instead of restarting that version forever: rolled back the same way, the message
naming the state schema, every record once. Three driver starts too. The other upgrade paths on
Spark: test_upgrade_live.py.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from hubflow.status import StatusFolder
from tests.dags.helpers import pid_alive
from tests.jobs.helpers import log_ids, write_json_landing_file
from tests.plugins.operators.test_upgrade_live import (
    JOB,
    SHORT,
    _deploy,
    _kill_drivers,
    _landed,
    _supervise,
    _table_ids,
    set_up_job,
)
from tests.support.processes import wait_until

pytestmark = pytest.mark.integration

#: Stateful: each id once (the state store keeps the ids seen, keyed by ``id``).
DEDUPLICATED_BY_ID = '''
"""Version 1: each order once, by id."""


def orders(orders):
    return orders.dropDuplicates(["id"])
'''

#: The same sources and sinks, but the state is keyed by (id, name): another state schema.
DEDUPLICATED_BY_ID_AND_NAME = '''
"""Version 2: each order once, by id and name."""


def orders(orders):
    return orders.dropDuplicates(["id", "name"])
'''


#: Spark's words for the state schema change, as the rollback's message quotes them.
KEY_SCHEMA_CHANGE = (
    "Existing key_schema=StructType(StructField(id,LongType,true)) and new key_schema="
    "StructType(StructField(id,LongType,true),StructField(name,StringType,true))."
)


def _supervisor_state(folder: StatusFolder) -> dict[str, Any]:
    return folder.read_json("supervisor.json") or {}


def _version_1_ran_file_a(spark: Any, tmp_path: Path, folder: StatusFolder) -> tuple[str, set[int]]:
    """Version 1 (deduplicated by id) started by the supervisor and file a in its table: its digest
    and the ids landed."""
    expected = write_json_landing_file(tmp_path / "landing", "a.json", 0, good=20, bad=0)
    _supervise()
    _landed(spark, tmp_path, expected, "file a in the table (version 1)")
    assert (tmp_path / "checkpoints" / JOB / "state").is_dir(), "version 1 is a stateful query"
    return _supervisor_state(folder)["fingerprint"]["digest"], expected


def _stop_and_clean(folder: StatusFolder) -> None:
    """Stop the job, kill what is left of its drivers and remove version 1's deployed copy."""
    started = (_supervisor_state(folder).get("upgrade") or {}).get("before") or (
        _supervisor_state(folder).get("fingerprint") or {}
    ).get("digest")
    try:
        _supervise("stop")
    finally:
        _kill_drivers(folder)
        if started:
            for copy in Path(tempfile.gettempdir()).glob(f"hubflow-version-{started[:SHORT]}"):
                shutil.rmtree(copy, ignore_errors=True)


@pytest.mark.timeout(1800)
def test_a_new_state_schema_is_rolled_back_naming_it_and_nothing_is_lost(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = set_up_job(
        tmp_path, monkeypatch, DEDUPLICATED_BY_ID, max_upgrade_failures=1, ready_within="5 minutes"
    )
    landing = tmp_path / "landing"
    checkpoint = tmp_path / "checkpoints" / JOB

    def state() -> dict[str, Any]:
        return _supervisor_state(folder)

    try:
        v1, expected = _version_1_ran_file_a(spark, tmp_path, folder)
        first_pid = folder.status()["pid"]

        _deploy(tmp_path, DEDUPLICATED_BY_ID_AND_NAME)
        # File b lands once version 1 is stopped and its checkpoint copied, so that the new version
        # has a batch to plan (with nothing to read it would report idle, which counts as ready).
        landed_b: dict[str, set[int]] = {}

        def land_b_once_version_1_stopped() -> None:
            def upgrading() -> bool:
                record = state().get("upgrade") or {}
                return record.get("outcome") == "in-progress" and record.get("before") == v1

            wait_until(upgrading, 300, "the upgrade in progress")
            landed_b["ids"] = write_json_landing_file(landing, "b.json", 1000, good=20, bad=0)

        lander = threading.Thread(target=land_b_once_version_1_stopped, daemon=True)
        lander.start()
        with pytest.raises(AirflowFailException) as rolled:
            _supervise()
        lander.join(10)
        assert "ids" in landed_b, "file b landed during the upgrade"
        expected |= landed_b["ids"]

        record = state()["upgrade"]
        text = str(rolled.value)
        assert (
            f"from version {v1[:SHORT]} to {record['after'][:SHORT]} was rolled back because it failed 1 "
            in text
        )
        assert record["outcome"] == "rolled-back" and record["failures"] == 1, record
        [died] = record["history"]
        # What changed, in Spark's words: the state's key schema, the existing one and the new one.
        assert "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match" in died, died
        assert KEY_SCHEMA_CHANGE in died, died
        assert died in text, "the run's message quotes it"
        assert not pid_alive(first_pid)

        _landed(spark, tmp_path, expected, "file b in the table (version 1 ran the new version's batch)")
        ids = _table_ids(spark, tmp_path)
        assert sorted(ids) == sorted(expected), "every landed record once"
        after = state()
        assert after["fingerprint"]["digest"] == v1, "version 1 runs again"
        assert log_ids(checkpoint / "commits")[-1] >= 1
    finally:
        _stop_and_clean(folder)


@pytest.mark.timeout(1800)
def test_a_new_state_schema_deployed_while_no_data_arrives_is_rolled_back_at_its_first_batch(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = set_up_job(
        tmp_path, monkeypatch, DEDUPLICATED_BY_ID, max_upgrade_failures=1, ready_within="5 minutes"
    )
    landing = tmp_path / "landing"
    checkpoint = tmp_path / "checkpoints" / JOB

    def state() -> dict[str, Any]:
        return _supervisor_state(folder)

    try:
        v1, expected = _version_1_ran_file_a(spark, tmp_path, folder)

        # Nothing lands during the upgrade: the new version plans no batch, so Spark checks no state.
        _deploy(tmp_path, DEDUPLICATED_BY_ID_AND_NAME)
        upgraded = _supervise()
        v2 = state()["fingerprint"]["digest"]
        assert upgraded["done"][-1].endswith(
            "the new version is ready while idle (nothing to read): until it commits its first batch, "
            "its death is a failed upgrade"
        ), upgraded
        assert state()["upgrade"]["first_batch_pending"] is True
        new_driver = folder.status()["pid"]

        # Data comes: the new version's first batch fails on the state's schema, and its driver exits.
        expected |= write_json_landing_file(landing, "b.json", 1000, good=20, bad=0)
        wait_until(lambda: not pid_alive(new_driver), 300, "the new version dies at its first batch")
        wait_until(lambda: not folder.liveness(30).alive, 60, "the new version found dead")

        with pytest.raises(AirflowFailException) as rolled:  # not restarted: judged as an upgrade
            _supervise()
        text = str(rolled.value)
        assert f"from version {v1[:SHORT]} to {v2[:SHORT]} was rolled back because it failed 1 " in text
        record = state()["upgrade"]
        assert record["outcome"] == "rolled-back" and not record["first_batch_pending"], record
        idle, died = record["history"]
        assert idle.startswith("ready while idle (nothing to read), then died at its first batch"), idle
        assert "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match" in died, died
        assert KEY_SCHEMA_CHANGE in died and died in text, "the user reads why, in Spark's words"

        _landed(spark, tmp_path, expected, "file b in the table (version 1 ran it)")
        ids = _table_ids(spark, tmp_path)
        assert sorted(ids) == sorted(expected), "every landed record once"
        assert state()["fingerprint"]["digest"] == v1, "version 1 runs again"
        planned = re.search(r"kept the job's query batch (\d+)", text)
        assert planned, f"the batch the new version planned is kept: {text}"
        assert log_ids(checkpoint / "commits")[-1] == int(planned.group(1)), "version 1 ran that batch"
        assert _supervise()["done"][-1] == f"job {JOB} keeps running version {v1[:SHORT]}"
    finally:
        _stop_and_clean(folder)
