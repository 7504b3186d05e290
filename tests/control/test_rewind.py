"""Rewind: the checkpoint is backed up whole, never edited, and the job restarts from chosen positions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hubflow.checkpoints.backups import backup_checkpoint, purge_checkpoint_backups
from hubflow.checkpoints.inspector import inspect_checkpoint
from hubflow.operations.rewind import (
    RewindError,
    check_delta_rewind,
    parse_sequence_numbers,
    rewind_positions,
    seed_checkpoint,
)
from tests.dags.helpers import airflow_env, run_airflow, write_registry
from tests.jobs.helpers import EmulatedHub, eventhubs_config, write_config
from tests.support.emulator import start_test_emulator
from tests.support.processes import wait_until

ENV_VAR = "HUBFLOW_EVENTHUBS_CONNECTION_STRING"


def test_positions_for_an_enqueued_time_cover_every_partition() -> None:
    positions = rewind_positions(["0", "1"], at_enqueued_time={"0": 7, "1": 3}, committed={"0": 9, "1": 9})
    assert positions == {"0": 7, "1": 3}


def test_positions_for_sequence_numbers_keep_other_partitions_at_their_commit() -> None:
    positions = rewind_positions(["0", "1"], sequence_numbers={"0": 5}, committed={"0": 20, "1": 30})
    assert positions == {"0": 5, "1": 30}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one rewind target"),
        ({"sequence_numbers": {"7": 1}}, r"no partition \['7'\]"),
        ({"sequence_numbers": {"0": 1}}, "partition 1 has no sequence number"),
    ],
)
def test_bad_rewind_targets_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(RewindError, match=message):
        rewind_positions(["0", "1"], **kwargs)


def test_sequence_numbers_must_be_json_of_non_negative_numbers() -> None:
    assert parse_sequence_numbers('{"0": 3, "2": "7"}') == {"0": 3, "2": 7}
    with pytest.raises(RewindError, match="JSON object"):
        parse_sequence_numbers("[1, 2]")
    with pytest.raises(RewindError, match="negative"):
        parse_sequence_numbers('{"0": -4}')


def test_a_delta_job_rewinds_forward_only() -> None:
    """Events the Delta table already holds would come back as new batches: written twice."""
    written = {"0": 20, "1": 30}
    check_delta_rewind({"0": 25, "1": 30}, written, ["/lake/bronze"])  # skips ahead: fine
    check_delta_rewind({"0": 5, "1": 30}, written, [])  # a parquet job may replay (side by side)
    with pytest.raises(RewindError) as refused:
        check_delta_rewind({"0": 5, "1": 30}, written, ["/lake/bronze"])
    message = str(refused.value)
    assert "partition 0: 5 < 20" in message and "partition 1" not in message
    assert "would be written twice" in message and "run a backfill" in message


def _old_checkpoint(root: Path, hub: str = "hub") -> Path:
    old = root / "backup"
    (old / "offsets").mkdir(parents=True)
    (old / "commits").mkdir()
    (old / "metadata").write_text('{"id":"q-1"}')
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{"spark.sql.shuffle.partitions":"2"}}'
    for batch in (6, 7):
        (old / "offsets" / str(batch)).write_text(f'v1\n{meta}\n{{"{hub}":{{"0":{batch * 10},"1":{batch}}}}}')
    (old / "commits" / "6").write_text('v1\n{"nextBatchWatermarkMs":0}')
    return old


def test_seeded_checkpoint_resumes_at_the_positions_after_the_old_batch_ids(tmp_path: Path) -> None:
    old = _old_checkpoint(tmp_path)
    new = tmp_path / "checkpoint"
    before = {p: p.read_text() for p in old.rglob("*") if p.is_file()}
    batch = seed_checkpoint(str(old), str(new), "hub", {"0": 5, "1": 2})
    assert batch == 7, "numbered like the newest planned batch, so the sink sees batch 8 next"
    lines = (new / "offsets" / "7").read_text().split("\n")
    assert lines[0] == "v1"
    assert json.loads(lines[1])["conf"] == {"spark.sql.shuffle.partitions": "2"}
    assert json.loads(lines[2]) == {"hub": {"0": 5, "1": 2}}
    assert (new / "commits" / "7").exists()
    # Spark resuming after batch 7 reads batch 6's offsets ("batch 6 doesn't exist" without them).
    assert (new / "offsets" / "6").read_text() == (new / "offsets" / "7").read_text()
    assert (new / "commits" / "6").exists()
    assert (new / "metadata").read_text() == '{"id":"q-1"}'
    assert {p: p.read_text() for p in old.rglob("*") if p.is_file()} == before, "the backup is untouched"
    report = inspect_checkpoint(str(new), stalled_after=timedelta(hours=1))
    assert str(report.verdict) == "healthy"


def test_seeding_refuses_stateful_queries_and_other_hubs(tmp_path: Path) -> None:
    old = _old_checkpoint(tmp_path)
    with pytest.raises(RewindError, match="exactly one Event Hubs source reading 'other'"):
        seed_checkpoint(str(old), str(tmp_path / "c1"), "other", {"0": 1})
    (old / "state" / "0").mkdir(parents=True)
    with pytest.raises(RewindError, match="keeps state"):
        seed_checkpoint(str(old), str(tmp_path / "c2"), "hub", {"0": 1, "1": 1})


def test_backup_moves_the_checkpoint_whole_and_purge_keeps_recent_backups(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoints" / "job"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1\n{}\n{}")
    (checkpoint / "metadata").write_text('{"id":"q"}')
    old = backup_checkpoint(str(checkpoint), now=datetime(2026, 1, 1, tzinfo=UTC))
    assert not checkpoint.exists()
    assert Path(old, "offsets", "0").read_text() == "v1\n{}\n{}"
    assert Path(old, "metadata").read_text() == '{"id":"q"}'
    assert backup_checkpoint(str(checkpoint)) is None, "nothing left to back up"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1\n{}\n{}")
    recent = backup_checkpoint(str(checkpoint), now=datetime(2026, 3, 1, tzinfo=UTC))
    deleted = purge_checkpoint_backups(
        str(checkpoint), timedelta(days=30), now=datetime(2026, 3, 2, tzinfo=UTC)
    )
    assert deleted == [old]
    assert Path(recent).exists() and not Path(old).exists()


def _lake_rows(spark, output: Path) -> list:
    from pyspark.errors import AnalysisException

    try:
        return spark.read.parquet(str(output)).select("partition", "sequenceNumber").collect()
    except AnalysisException:
        return []


def _identities(spark, output: Path) -> Counter:
    """How many times each event, (partition, sequence number), is in the lake."""
    return Counter((r.partition, r.sequenceNumber) for r in _lake_rows(spark, output))


def _status(base: Path) -> dict:
    try:
        return json.loads((base / "status" / "telemetry" / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _lease(base: Path) -> dict:
    """The job's lease document ({} when there is none)."""
    try:
        return json.loads((base / "status" / "telemetry" / "lease").read_text())
    except (OSError, ValueError):
        return {}


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes: a checkpoint as it is on disk."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _alive(pid: object) -> bool:
    from tests.dags.helpers import pid_alive

    return pid_alive(pid)


#: Why the second on-call person stops the job while the first one's rewind waits.
STOP_REASON = "sink storage failing over; keep it stopped after the replay"


@pytest.mark.integration
@pytest.mark.timeout(1500)
def test_oncall_restart_rewind_and_a_start_and_a_stop_during_a_rewind_on_a_live_job(
    airflow_home, spark, tmp_path: Path
) -> None:
    """The on-call DAG's live paths on an Event Hubs job (issue #47 item 7): a restart replaces the
    running driver and every event lands once; a rewind backs up and replays from the chosen
    sequence numbers; while a rewind waits for the job's lease (held here by a process of the test,
    as by a driver that has not let go yet), a second person's start is refused naming the rewind,
    and their stop is taken: the rewind then seeds the new checkpoint but leaves the job held, and
    the next start replays from the rewound positions."""
    from hubflow.operations.audit import read_audit
    from hubflow.status import StatusFolder
    from tests.dags.helpers import AIRFLOW, REPO_ROOT
    from tests.support.processes import start_background, stop_process

    emulator = start_test_emulator(tmp_path, telemetry=2)
    status_dir = tmp_path / "status" / "telemetry"
    folder = StatusFolder(str(status_dir))
    checkpoint = tmp_path / "checkpoints" / "telemetry"
    backups = tmp_path / "checkpoints" / "_backups" / "telemetry"
    background: list = []
    try:
        conn = emulator.connection_string("telemetry")
        hub = EmulatedHub("telemetry", conn, 2)
        hub.send_numbered(0, 40)  # 20 events in each partition
        config = eventhubs_config(
            tmp_path, hub, ENV_VAR, name="telemetry", trigger={"processingTime": "1 second"}
        )
        config["trigger"] = {"processingTime": "1 second"}
        config_path = write_config(tmp_path / "telemetry.yaml", config)
        registry = write_registry(
            tmp_path,
            [
                {
                    "name": "telemetry",
                    "application": "eventhubs_to_lake",
                    "config": str(config_path),
                    "mode": "streaming",
                    "eventhubs_conn_id": "eventhubs_default",
                }
            ],
        )
        env = airflow_env(airflow_home, registry)
        env["AIRFLOW_CONN_EVENTHUBS_DEFAULT"] = json.dumps({"conn_type": "generic", "password": conn})
        output = tmp_path / "lake" / "bronze"

        def oncall(action: str, ok: bool = True, **extra: str) -> str:
            conf = json.dumps({"action": action, "dry_run": False, **extra})
            result = run_airflow(env, "dags", "test", "telemetry__oncall", "-c", conf)
            text = result.stdout + result.stderr
            assert (result.returncode == 0) == ok, text[-6000:]
            assert "SAS_KEY_VALUE" not in text, "the key must never reach a task log"
            return text

        def landed(expected: Counter, what: str) -> None:
            """Every event of ``expected`` in the lake as many times as it says, and nothing else."""
            try:
                wait_until(lambda: _identities(spark, output).total() >= expected.total(), 180, what)
            finally:
                found = _identities(spark, output)
                log = (status_dir / "driver.log").read_text(errors="replace")[-4000:]
                missing, extra = expected - found, found - expected
                assert found == expected, f"{what}: missing {missing}, extra {extra}\n{log}"

        oncall("start")
        wait_until(lambda: len(_lake_rows(spark, output)) == 40, 180, "the first 40 events in the lake")

        text = oncall("rewind", rewind_to_sequence_numbers='{"0": 5}')
        assert "checkpoint moved to" in text
        first_backups = list(backups.iterdir())
        assert len(first_backups) == 1 and (first_backups[0] / "offsets" / "0").exists()
        hub.send_numbered(40, 10)  # 5 more in each partition
        # Partition 0 replays 5..19 (15 rows again) and both read the 10 new events: 40 + 15 + 10.
        wait_until(lambda: len(_lake_rows(spark, output)) >= 65, 180, "the replayed and new events")
        counts = _identities(spark, output)
        assert {k for k, n in counts.items() if n == 2} == {("0", s) for s in range(5, 20)}
        assert all(n == 1 for (p, s), n in counts.items() if p == "1" or s < 5 or s >= 20)
        assert set(counts) == {(p, s) for p in ("0", "1") for s in range(25)}

        # Restart of the running job: its driver is replaced (another pid and lease holder; the old
        # driver's processes are gone), and the events sent before it (25..29 in each partition,
        # perhaps in a batch when it stops) and after it (30..34) land once each.
        before, holder = _status(tmp_path), _lease(tmp_path).get("holder")
        assert before.get("state") == "running" and _alive(before.get("pid")) and holder, (before, holder)
        hub.send_numbered(50, 10)
        text = oncall("restart")
        assert "stopped gracefully" in text and "started job telemetry" in text
        after = _status(tmp_path)
        assert after.get("pid") != before["pid"] and _alive(after.get("pid")), (before, after)
        wait_until(
            lambda: not any(_alive(before.get(key)) for key in ("pid", "jvm_pid")),
            60,
            "the old driver's processes to exit",
        )
        assert _lease(tmp_path).get("holder") not in (None, holder), "the new driver holds a new lease"
        hub.send_numbered(60, 10)
        expected = Counter({(p, s): 1 for p in ("0", "1") for s in range(35)})
        expected.update({("0", s): 1 for s in range(5, 20)})  # the rewind's replay above
        landed(expected, "every event once across the restart")

        # A rewind of partition 1 that waits for the lease: the job is stopped, and a process of the
        # test holds its lease (as a driver elsewhere that has not let go of the checkpoint yet).
        oncall("stop")
        stopped = _status(tmp_path)
        assert stopped.get("state") == "stopped" and not _alive(stopped.get("pid")), stopped
        keeper_log = (tmp_path / "lease_keeper.log").open("w")
        background.append(keeper_log)
        keeper = subprocess.Popen(
            [sys.executable, "-m", "tests.support.lease_keeper", str(status_dir), "telemetry"],
            cwd=REPO_ROOT,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
            },
            stdin=subprocess.PIPE,
            stdout=keeper_log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group, as stop_process expects
        )
        background.append(keeper)
        wait_until(
            lambda: _lease(tmp_path).get("pid") == keeper.pid, 120, "the test's process to hold the lease"
        )
        kept = _files(checkpoint)
        conf = {"action": "rewind", "dry_run": False, "rewind_to_sequence_numbers": '{"1": 10}'}
        rewind_log = tmp_path / "rewind.log"
        rewind = start_background(
            [AIRFLOW, "dags", "test", "telemetry__oncall", "-c", json.dumps(conf)], rewind_log, env
        )
        background.append(rewind)

        def rewinding() -> object:
            hold = folder.hold()
            return hold if hold is not None and hold.kind == "rewind" else None

        rewind_hold = wait_until(rewinding, 300, "the rewind to hold the job")
        rewind_run = rewind_hold.by.split("(run ", 1)[1].rstrip(")")

        def unchanged(when: str) -> None:
            """The rewind still waits: the checkpoint untouched, no second backup, no driver."""
            assert rewind.poll() is None, rewind_log.read_text(errors="replace")[-6000:]
            assert _lease(tmp_path).get("pid") == keeper.pid, f"{when}: the test's process holds the lease"
            assert _files(checkpoint) == kept, f"{when}: the checkpoint is untouched"
            assert list(backups.iterdir()) == first_backups, f"{when}: no backup yet"
            now = _status(tmp_path)
            assert (now.get("pid"), now.get("state")) == (stopped.get("pid"), "stopped"), (when, now)

        # (1) A start by someone else meanwhile is refused, naming the rewind and who runs it.
        text = oncall("start", ok=False)
        named = [line for line in text.splitlines() if rewind_run in line]
        assert any("rewind" in line for line in named), text[-6000:]
        assert "started spark-submit" not in text
        unchanged("after the refused start")

        # (2) A stop meanwhile is taken: it replaces the rewind's hold with a stop hold.
        text = oncall("stop", reason=STOP_REASON)
        stop_hold = folder.hold()
        assert stop_hold is not None and stop_hold.kind == "stop" and stop_hold.reason == STOP_REASON
        assert stop_hold.by != rewind_hold.by and stop_hold.by.startswith("dag_test (run "), stop_hold
        unchanged("after the stop")

        # The lease is let go: the rewind backs up and seeds the new checkpoint, leaves the stop's
        # hold and does not start the job.
        keeper.stdin.write("release\n")
        keeper.stdin.flush()
        wait_until(lambda: rewind.poll() is not None, 300, "the rewind to end once the lease is free")
        text = rewind_log.read_text(errors="replace")
        assert rewind.returncode == 0, text[-6000:]
        assert "checkpoint moved to" in text and "resumes after batch" in text
        assert "placed during the rewind: the hold stays and the job is not started" in text
        assert "started spark-submit" not in text
        assert folder.hold() == stop_hold, "the stop's hold, as the second person placed it"
        assert len(list(backups.iterdir())) == 2 and _files(checkpoint) != kept
        now = _status(tmp_path)
        assert (now.get("pid"), now.get("state")) == (stopped.get("pid"), "stopped"), now

        # Their start releases it: the job resumes from the rewound checkpoint, partition 1 replays
        # 10..34 and both partitions read the new events 35..39.
        hub.send_numbered(70, 10)
        text = oncall("start")
        assert "released the hold by dag_test" in text and "started job telemetry" in text
        expected.update({("1", s): 1 for s in range(10, 35)})
        expected.update({(p, s): 1 for p in ("0", "1") for s in range(35, 40)})
        landed(expected, "the rewound partition's replay and the new events")

        trail = [(e.action, e.outcome.split(":")[0]) for e in read_audit(folder)]
        assert trail[-5:] == [
            ("stop", "done"),
            ("start", "refused"),
            ("stop", "done"),
            ("rewind", "done"),
            ("start", "done"),
        ], trail
        rewound = read_audit(folder)[-2]
        assert rewound.by == rewind_hold.by and rewound.hold_after == stop_hold.describe(), rewound
    finally:
        for process in background:
            if not isinstance(process, subprocess.Popen):
                process.close()
            elif process.poll() is None:
                stop_process(process)
        status = _status(tmp_path)
        for pid in (status.get("pid"), status.get("jvm_pid")):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        emulator.stop()


def test_the_job_is_held_from_before_its_checkpoint_moves_until_its_new_one_is_written(
    tmp_path: Path,
) -> None:
    """A supervisor run in the middle of a rewind finds the job held (so starts nothing); the hold is
    released just before the rewind starts the job itself, and one that fails part-way stays."""
    from hubflow.operations.job_control import JobControl
    from hubflow.operations.rewind import REWIND_HOLD_REASON, rewind_job
    from hubflow.registry import RegisteredJob

    config = eventhubs_config(tmp_path, EmulatedHub("hub", "unused", 2), ENV_VAR, name="telemetry")
    config_path = write_config(tmp_path / "telemetry.yaml", config)
    job = RegisteredJob(
        name="telemetry", application="eventhubs_to_lake", config=str(config_path), mode="streaming"
    )
    _old_checkpoint(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "backup").rename(job.paths.checkpoint_location)
    control = JobControl(job.name, job.paths.status_dir)
    control.folder.place_hold("on-call stop", by="alice")
    holds: dict[str, object] = {}

    def log(message: str, *args: object) -> None:
        line = message % args if args else message
        if line.startswith("checkpoint moved to"):
            holds["while moved"] = control.folder.hold()

    def start() -> str:
        holds["at start"] = control.folder.hold()
        return "started job telemetry"

    def rewind(to: str) -> dict:
        live = control.liveness()
        return rewind_job(
            job,
            control,
            live,
            hub="hub",
            latest={"0": 100, "1": 100},
            connection_string="",
            to_enqueued_time=None,
            to_sequence_numbers=to,
            dry_run=False,
            who="bob",
            stop_wait=timedelta(seconds=5),
            start=start,
            log=log,
        )

    result = rewind('{"0": 5, "1": 2}')
    held = holds["while moved"]
    assert held is not None and held.reason == REWIND_HOLD_REASON and held.by == "bob"
    assert holds["at start"] is None and control.folder.hold() is None
    first = result["done"][0]
    assert first.startswith("held job telemetry by bob at ") and "(replacing the hold by alice at " in first
    assert first.endswith(": on-call stop)")

    # A rewind that fails after the move (the hub named in the checkpoint is another) stays held.
    holds.clear()
    with pytest.raises(RewindError, match="The old checkpoint is intact in"):
        rewind_job(
            job,
            control,
            control.liveness(),
            hub="other",
            latest={"0": 100, "1": 100},
            connection_string="",
            to_enqueued_time=None,
            to_sequence_numbers='{"0": 1, "1": 1}',
            dry_run=False,
            who="bob",
            stop_wait=timedelta(seconds=5),
            start=start,
            log=log,
        )
    assert "at start" not in holds
    left = control.folder.hold()
    assert left is not None and left.reason == REWIND_HOLD_REASON
