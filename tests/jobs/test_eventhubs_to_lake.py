"""eventhubs_to_lake against the embedded emulator: every event exactly once, raw body kept,
across availableNow runs and across kill -9 of the driver at random moments - for the Delta table
also between the batch's Delta commit and Spark's commit."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hubflow.config import ConfigError, load_config
from hubflow.status.exit_codes import EXIT_OK
from hubflow_jobs.builtins.eventhubs_to_lake import EventHubsToLakeConfig
from hubflow_jobs.pipeline.job import start_function
from hubflow_jobs.runtime.runner import run_job
from hubflow_jobs.runtime.stop import StopRequest
from tests.support.processes import wait_until

from .helpers import (
    EVENTHUBS_TO_LAKE,
    EmulatedHub,
    eventhubs_config,
    last_log_line,
    log_ids,
    read_status,
    spark_submit,
    write_config,
)

pytestmark = pytest.mark.integration
start_eventhubs_to_lake = start_function("eventhubs_to_lake")

ENV_VAR = "HUBFLOW_TEST_EVENTHUBS_CONNECTION"


def _check_exactly_once(spark: Any, output: Path, sent: set[bytes], sink_format: str = "parquet") -> None:
    """The lake holds every sent event once: unique (partition, sequenceNumber), raw bodies equal."""
    frame = spark.read.format(sink_format).load(str(output))
    rows = frame.select("partition", "sequenceNumber", "body").collect()
    identities = [(r["partition"], r["sequenceNumber"]) for r in rows]
    assert len(identities) == len(set(identities)), "an event was written twice"
    bodies = [bytes(r["body"]) for r in rows]
    assert len(rows) == len(sent), f"{len(sent) - len(set(bodies) & sent)} events missing"
    assert set(bodies) == sent


def test_config_names_the_missing_variable_and_never_echoes_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = EmulatedHub("hub1", "unused", partitions=4)
    monkeypatch.delenv(ENV_VAR, raising=False)
    path = write_config(tmp_path / "job.yaml", eventhubs_config(tmp_path, hub, ENV_VAR))
    with pytest.raises(ConfigError) as missing:
        load_config(path, EventHubsToLakeConfig)
    assert str(missing.value) == (
        f"jobs config error: source.connection_string_env: environment variable {ENV_VAR} is not set; "
        "export the Event Hubs connection string in it"
    )
    secret = "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=TOPSECRET;EntityPath=hub1"
    monkeypatch.setenv(ENV_VAR, secret)
    config = eventhubs_config(
        tmp_path, hub, ENV_VAR, source={"options": {"eventhubs.connectionString": secret}}
    )
    with pytest.raises(ConfigError) as reserved:
        load_config(write_config(tmp_path / "job.yaml", config), EventHubsToLakeConfig)
    assert "source.options.eventhubs.connectionString: is set by the job itself" in str(reserved.value)
    assert "TOPSECRET" not in str(reserved.value)
    loaded = load_config(
        write_config(tmp_path / "job.yaml", eventhubs_config(tmp_path, hub, ENV_VAR)), EventHubsToLakeConfig
    )
    assert loaded.extra_spark_conf()["spark.redaction.regex"].count("connectionstring") == 1
    assert loaded.sources["events"].spark_options()["eventhubs.connectionString"] == secret


def test_available_now_lands_every_event_once_with_its_raw_body(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, eventhub.connection_string)
    config = load_config(
        write_config(tmp_path / "job.yaml", eventhubs_config(tmp_path, eventhub, ENV_VAR)),
        EventHubsToLakeConfig,
    )
    sent = eventhub.send_numbered(0, 1500)
    binary = {"0": [bytes(range(256)), b"\x00\xff{not json"]}
    eventhub.send(binary)
    sent |= set(binary["0"])

    code, reason = run_job(spark, config, start_eventhubs_to_lake, StopRequest())

    assert code == EXIT_OK, reason
    output = Path(config.sinks["bronze"].output_path)
    _check_exactly_once(spark, output, sent)
    today = datetime.now(UTC).date().isoformat()
    assert [p.name for p in output.iterdir() if p.name.startswith("ingest_date=")] == [f"ingest_date={today}"]
    status = read_status(tmp_path, "eventhubs_to_lake")
    assert status["state"] == "stopped"
    source = status["last_progress"]["sources"][0]
    assert source["end_offset"] == eventhub.expected_offsets()
    assert source["latest_offset"] == eventhub.expected_offsets(), "the lag (latest offset) is reported"
    assert (source["backlog"]["eventsBehindLatest"], source["backlog"]["secondsBehindLatest"]) == (0, 0.0)

    more = eventhub.send_numbered(10_000, 300)
    code, reason = run_job(spark, config, start_eventhubs_to_lake, StopRequest())
    assert code == EXIT_OK, reason
    _check_exactly_once(spark, output, sent | more)


def _kill_between_delta_and_spark_commits(job: Any, table: Path, commits: Path, deadline: float) -> int:
    """Freeze the driver as soon as the Delta table gains a commit; kill it there if Spark has not
    written that batch's commit file yet (else let it go on and wait for the next). Returns the batch.

    SIGSTOP stops the whole process group at once, so what is on disk when the check runs is what
    a kill at that moment leaves behind.
    """
    log_dir = table / "_delta_log"

    def newest_version() -> int:
        names = os.listdir(log_dir) if log_dir.is_dir() else []
        return max((int(n[:20]) for n in names if re.fullmatch(r"\d{20}\.json", n)), default=-1)

    seen = newest_version()
    while time.monotonic() < deadline:
        version = newest_version()
        if version == seen:
            if job.poll() is not None:
                raise AssertionError("the job ended before a kill between the two commits")
            time.sleep(0.002)
            continue
        os.killpg(job.pid, signal.SIGSTOP)
        commit = log_dir / f"{version:020d}.json"
        actions = [json.loads(line) for line in commit.read_text().splitlines() if line]
        (batch,) = [a["txn"]["version"] for a in actions if "txn" in a]
        if not (commits / str(batch)).exists():
            os.killpg(job.pid, signal.SIGKILL)
            return batch
        os.killpg(job.pid, signal.SIGCONT)
        seen = version
    raise AssertionError("no batch was caught between its Delta commit and Spark's commit in time")


def _run_with_kills(
    spark: Any,
    eventhub: EmulatedHub,
    tmp_path: Path,
    total: int,
    kills: int,
    per_trigger: int,
    seed: int,
    sink_format: str = "parquet",
    between_commits: frozenset[int] = frozenset(),
) -> None:
    """Send ``total`` events while the job runs; kill -9 it ``kills`` times; check exactly once.

    Kills numbered in ``between_commits`` (Delta only) land after a batch's Delta commit and before
    Spark's commit file for it; the others at random moments.
    """
    config = write_config(
        tmp_path / "job.yaml",
        eventhubs_config(
            tmp_path,
            eventhub,
            ENV_VAR,
            trigger={"availableNow": False, "processingTime": "1 second"},
            source={"connection_string_env": ENV_VAR, "max_events_per_trigger": per_trigger},
            runtime={
                "heartbeat_interval": "1 second",
                "poll_interval": "200 ms",
                "lease_duration": "10 minutes",
            },
            sink={"format": sink_format},
        ),
    )
    env = {ENV_VAR: eventhub.connection_string}
    sent: set[bytes] = set()
    chunks = 10

    def send_all() -> None:
        for chunk in range(chunks):
            sent.update(eventhub.send_numbered(chunk * (total // chunks), total // chunks))

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    rng = random.Random(seed)
    status_file = tmp_path / "status" / "eventhubs_to_lake" / "status.json"
    seen_runs: set[str] = set()

    def new_run_started() -> bool:
        try:
            run_id = json.loads(status_file.read_text())["run_id"]
        except (FileNotFoundError, ValueError):
            return False
        return run_id is not None and run_id not in seen_runs

    commits = tmp_path / "checkpoints" / "eventhubs_to_lake" / "commits"
    table = tmp_path / "lake" / "bronze"
    kill_moments: list[tuple[int, Any]] = []
    caught_between: list[int] = []
    for kill in range(kills):
        log = tmp_path / f"run{kill}.log"
        job = spark_submit(config, log, script=EVENTHUBS_TO_LAKE, extra_env=env)
        try:
            wait_until(lambda job=job: new_run_started() or job.poll() is not None, 120, "the query to start")
            assert job.poll() is None, last_log_line(log)
            seen_runs.add(json.loads(status_file.read_text())["run_id"])
            if kill in between_commits:
                batch = _kill_between_delta_and_spark_commits(job, table, commits, time.monotonic() + 300)
                caught_between.append(batch)
                job.wait()
                assert not (commits / str(batch)).exists(), "killed after Spark's commit after all"
                delay: Any = f"between the commits of batch {batch}"
            elif kill % 2 == 0:
                # After this run committed a batch: lands in the next batch or between batches.
                before = len(log_ids(commits))
                wait_until(
                    lambda job=job, before=before: len(log_ids(commits)) > before or job.poll() is not None,
                    180,
                    "a batch committed by this run",
                )
                delay = rng.uniform(0.0, 3.0)
            else:
                delay = rng.uniform(0.5, 8.0)  # while planning or writing the run's first batch
            if isinstance(delay, float):
                threading.Event().wait(delay)
                assert job.poll() is None, f"run {kill} ended before its kill: {last_log_line(log)}"
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        kill_moments.append((len(log_ids(commits)), round(delay, 1) if isinstance(delay, float) else delay))
    # Each kill that waited for a batch of its run adds one commit at least (the random ones may or
    # may not land after one: on a loaded machine a run's first batch can outlast their delay).
    waited = [kill for kill in range(kills) if kill % 2 == 0 and kill not in between_commits]
    assert kill_moments[-1][0] >= max(1, len(waited)), (
        f"the kills should interrupt a committing job: {kill_moments}"
    )
    assert len(caught_between) == len(between_commits), kill_moments
    sender.join(300)
    assert not sender.is_alive()

    log = tmp_path / "final.log"
    job = spark_submit(config, log, script=EVENTHUBS_TO_LAKE, extra_env=env)
    try:

        def caught_up() -> bool:
            try:
                progress = json.loads(status_file.read_text())["last_progress"]
                return progress["sources"][0]["end_offset"] == eventhub.expected_offsets()
            except (FileNotFoundError, ValueError, KeyError, TypeError, IndexError):
                return False

        wait_until(lambda: caught_up() or job.poll() is not None, 600, "the job to read every event")
        (tmp_path / "status" / "eventhubs_to_lake" / "STOP").touch()
        assert job.wait(120) == EXIT_OK, last_log_line(log)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert "taking over the lease of job eventhubs_to_lake" in log.read_text()
    secret = re.search(r"SharedAccessKey=([^;]+)", eventhub.connection_string).group(1)
    for run_log in tmp_path.glob("*.log"):
        assert secret not in run_log.read_text(errors="replace"), f"the SAS key leaked into {run_log.name}"
    _check_exactly_once(spark, table, sent, sink_format)
    assert len(sent) == total


def test_delta_table_survives_kill_9_at_random_moments_and_between_its_two_commits(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path
) -> None:
    _run_with_kills(
        spark,
        eventhub,
        tmp_path,
        total=1_000,
        kills=2,  # one at a random moment, one between the two commits (the slow soak kills six times)
        per_trigger=100,
        seed=5,
        sink_format="delta",
        between_commits=frozenset({1}),
    )


@pytest.mark.slow
@pytest.mark.parametrize("sink_format", ["delta", "parquet"])
def test_six_kills_during_100k_events_lose_and_repeat_nothing(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path, sink_format: str
) -> None:
    between = frozenset({1, 4}) if sink_format == "delta" else frozenset()
    _run_with_kills(
        spark,
        eventhub,
        tmp_path,
        total=100_000,
        kills=6,
        per_trigger=5_000,
        seed=7,
        sink_format=sink_format,
        between_commits=between,
    )
