"""eventhubs_aggregate against the embedded emulator on real Spark: exact window sums per key,
late events counted, bad events quarantined, a re-run batch writes no window twice, RocksDB state.
The job is the built-in pipeline (hubflow_jobs.builtins.eventhubs_aggregate), run with the config
keys of before pipelines, as an upgrading team has them."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hubflow.config import load_config
from hubflow.status.exit_codes import EXIT_CONFIG_ERROR, EXIT_OK
from hubflow_jobs.builtins.eventhubs_aggregate import (
    QUARANTINE,
    QUARANTINE_CHECKPOINT,
    SINK,
    EventHubsAggregateConfig,
)
from hubflow_jobs.pipeline.job import start_function
from hubflow_jobs.pipeline.progress import ROCKSDB_PROVIDER, STATE_STORE_PROVIDER_CONF
from hubflow_jobs.runtime.runner import run_job
from hubflow_jobs.runtime.stop import StopRequest
from tests.support.processes import wait_until

from .helpers import (
    JOBS_DIR,
    EmulatedHub,
    eventhubs_config,
    last_log_line,
    log_ids,
    python_job,
    read_status,
    spark_submit,
    write_config,
)
from .pipelines_support import wait_for_listener_events

pytestmark = pytest.mark.integration

ENV_VAR = "HUBFLOW_TEST_AGGREGATE_CONNECTION"
EVENTHUBS_AGGREGATE = JOBS_DIR / "eventhubs_aggregate.py"
NAME = "eventhubs_aggregate"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def aggregate_config(base: Path, hub: EmulatedHub, **overrides: Any) -> dict[str, Any]:
    """A valid eventhubs_aggregate config: 1-minute windows, 30-second watermark, availableNow."""
    config = eventhubs_config(base, hub, ENV_VAR, name=NAME)
    config["aggregation"] = {
        "body_schema": "device STRING, ts TIMESTAMP, temp DOUBLE",
        "event_time_field": "ts",
        "key_field": "device",
        "value_field": "temp",
        "functions": ["sum", "count", "min", "max"],
        "window": "1 minute",
        "watermark": "30 seconds",
    }
    config["sink"] = {
        "output_path": str(base / "lake" / "device_minutes"),
        "quarantine_path": str(base / "quarantine" / "device_minutes"),
        "format": "parquet",
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def reading(device: str | None, seconds: float, temp: float) -> bytes:
    """A JSON event body ``seconds`` after T0 (``device`` None leaves the key out)."""
    body: dict[str, Any] = {"ts": (T0 + timedelta(seconds=seconds)).isoformat(), "temp": temp}
    if device is not None:
        body["device"] = device
    return json.dumps(body).encode()


def spread(bodies: list[bytes], partitions: int = 4) -> dict[str, list[bytes]]:
    """The bodies round robin over the hub's partitions (order kept within each partition)."""
    per_partition: dict[str, list[bytes]] = {str(p): [] for p in range(partitions)}
    for index, body in enumerate(bodies):
        per_partition[str(index % partitions)].append(body)
    return per_partition


def windows(spark: Any, output: Path) -> list[tuple[Any, ...]]:
    """Every committed output row as (window minute, device, count, sum, n, min, max), sorted."""
    rows = spark.read.parquet(str(output)).collect()
    return sorted(
        (
            int((r["window_start"].replace(tzinfo=UTC) - T0).total_seconds() // 60),
            r["device"],
            r["event_count"],
            r["temp_sum"],
            r["temp_count"],
            r["temp_min"],
            r["temp_max"],
        )
        for r in rows
    )


@pytest.fixture
def job_spark(spark: Any) -> Iterator[Any]:
    """The shared session; the job sets the state store provider on it, put back afterwards."""
    before = spark.conf.get(STATE_STORE_PROVIDER_CONF, None)
    yield spark
    if before is None:
        spark.conf.unset(STATE_STORE_PROVIDER_CONF)
    else:
        spark.conf.set(STATE_STORE_PROVIDER_CONF, before)


def test_config_errors_name_the_key_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=TOPSECRET")
    hub = EmulatedHub("hub1", "unused", partitions=4)
    path = write_config(
        tmp_path / "job.yaml", aggregate_config(tmp_path, hub, aggregation={"key_field": "sensor"})
    )
    result = python_job(path, script=EVENTHUBS_AGGREGATE)
    assert result.returncode == EXIT_CONFIG_ERROR
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.endswith(
        "jobs config error: aggregation.key_field: 'sensor' is not a field of body_schema "
        "['device', 'ts', 'temp']"
    )
    bad_window = aggregate_config(
        tmp_path,
        hub,
        aggregation={"window": "one minute", "functions": ["sum", "avg"]},
        sink={"output_path": str(tmp_path / "out"), "quarantine_path": str(tmp_path / "out")},
    )
    result = python_job(write_config(tmp_path / "job.yaml", bad_window), script=EVENTHUBS_AGGREGATE)
    assert result.returncode == EXIT_CONFIG_ERROR
    message = result.stderr.strip().splitlines()[-1]
    for key in ("aggregation.functions.1", "aggregation.window", "sink.quarantine_path"):
        assert key in message
    assert "TOPSECRET" not in result.stderr
    assert not (tmp_path / "checkpoints").exists(), "nothing may start on a bad config"


def test_windows_late_events_quarantine_and_rerun_exactly_once(
    job_spark: Any, eventhub: EmulatedHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spark = job_spark
    monkeypatch.setenv(ENV_VAR, eventhub.connection_string)
    config = load_config(
        write_config(tmp_path / "job.yaml", aggregate_config(tmp_path, eventhub)), EventHubsAggregateConfig
    )
    output = Path(config.sinks[SINK].output_path)  # type: ignore[union-attr]
    quarantine = Path(config.sinks[QUARANTINE].output_path)  # type: ignore[union-attr]
    start_eventhubs_aggregate = start_function("eventhubs_aggregate")

    # Run 1: windows 0 and 1 complete; c at 5:00 moves the watermark to 4:30, so window 5 stays open.
    good = [
        reading("a", 5, 1.0),
        reading("a", 40, 2.0),
        reading("b", 30, 10.0),
        reading("a", 70, 4.0),
        reading("b", 110, 20.0),
        reading("b", 119, 30.0),
        reading("c", 300, 100.0),
    ]
    bad = [
        b"not json at all",
        json.dumps({"device": "a", "temp": 1.0}).encode(),  # no event time
        reading(None, 20, 3.0),  # no key
        json.dumps({"device": "a", "ts": "yesterday-ish", "temp": 1.0}).encode(),  # not a timestamp
    ]
    eventhub.send(spread(good + bad))
    code, reason = run_job(spark, config, start_eventhubs_aggregate, StopRequest())
    assert code == EXIT_OK, reason
    assert windows(spark, output) == [
        (0, "a", 2, 3.0, 2, 1.0, 2.0),
        (0, "b", 1, 10.0, 1, 10.0, 10.0),
        (1, "a", 1, 4.0, 1, 4.0, 4.0),
        (1, "b", 2, 50.0, 2, 20.0, 30.0),
    ]
    quarantined = spark.read.parquet(str(quarantine)).collect()
    assert sorted(r["raw_body"].encode() for r in quarantined) == sorted(bad)
    reasons = {r["raw_body"].encode(): r["reason"] for r in quarantined}
    assert reasons[bad[0]] == "body is not a JSON object matching aggregation.body_schema"
    assert reasons[bad[1]] == "event time field 'ts' is missing or not a timestamp"
    assert reasons[bad[2]] == "key field 'device' is missing"
    assert reasons[bad[3]] in {reasons[bad[0]], reasons[bad[1]]}
    assert len({(r["partition"], r["sequenceNumber"]) for r in quarantined}) == len(bad)
    assert (quarantine / QUARANTINE_CHECKPOINT / "commits").is_dir()
    # counts and late_events come from listeners on Spark's bus (the quarantine's from a helper
    # session's query), which may still be delivering the last batches' progress: wait for them.
    wait_for_listener_events(spark)
    status = read_status(tmp_path, NAME)
    assert status["state"] == "stopped"
    assert status["counts"] == {"read": 11, "aggregated": 7, "quarantined": 4}
    assert status["late_events"]["run_total"] == 0

    # Run 2: two events of closed windows are late (dropped, counted); d at 4:20 is older than the
    # watermark (4:30) but its window [4:00, 5:00) is still open, so it counts; e at 10:00 closes 4 and 5.
    late = [reading("a", 50, 1000.0), reading("b", 90, 1000.0)]
    eventhub.send(spread([*late, reading("d", 260, 7.0), reading("d", 285, 8.0), reading("e", 600, 1.0)]))
    code, reason = run_job(spark, config, start_eventhubs_aggregate, StopRequest())
    assert code == EXIT_OK, reason
    expected = [
        (0, "a", 2, 3.0, 2, 1.0, 2.0),
        (0, "b", 1, 10.0, 1, 10.0, 10.0),
        (1, "a", 1, 4.0, 1, 4.0, 4.0),
        (1, "b", 2, 50.0, 2, 20.0, 30.0),
        (4, "d", 2, 15.0, 2, 7.0, 8.0),
        (5, "c", 1, 100.0, 1, 100.0, 100.0),
    ]
    assert windows(spark, output) == expected
    wait_for_listener_events(spark)
    status = read_status(tmp_path, NAME)
    assert status["late_events"]["run_total"] == len(late), status
    assert status["counts"] == {"read": 5, "aggregated": 5, "quarantined": 0}

    # The state lives in RocksDB: the provider is pinned in the checkpoint's offset log.
    checkpoint = Path(config.checkpoint_location)
    first_offsets = (checkpoint / "offsets" / "0").read_text().splitlines()
    assert json.loads(first_offsets[1])["conf"][STATE_STORE_PROVIDER_CONF] == ROCKSDB_PROVIDER

    # A driver that died after writing a batch's output but before committing it: the restart
    # re-runs the batch from the offset and state logs, and the file sink writes no window twice.
    last = log_ids(checkpoint / "commits")[-1]
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    code, reason = run_job(spark, config, start_eventhubs_aggregate, StopRequest())
    assert code == EXIT_OK, reason
    assert last in log_ids(checkpoint / "commits")
    assert windows(spark, output) == expected
    assert len(spark.read.parquet(str(quarantine)).collect()) == len(bad)


def test_spark_submit_long_running_job_stops_both_queries_on_the_marker(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path
) -> None:
    secret_env = {ENV_VAR: eventhub.connection_string}
    config = aggregate_config(
        tmp_path, eventhub, trigger={"availableNow": False, "processingTime": "1 second"}
    )
    path = write_config(tmp_path / "job.yaml", config)
    eventhub.send(spread([reading("a", 5, 1.0), reading("a", 30, 2.0), reading("b", 200, 3.0), b"{broken"]))
    log = tmp_path / "run.log"
    job = spark_submit(path, log, script=EVENTHUBS_AGGREGATE, extra_env=secret_env)
    status_file = tmp_path / "status" / NAME / "status.json"

    def counted() -> bool:
        try:
            counts = json.loads(status_file.read_text()).get("counts") or {}
        except (FileNotFoundError, ValueError):
            return False
        return counts.get("aggregated") == 3 and counts.get("quarantined") == 1

    try:
        wait_until(lambda: counted() or job.poll() is not None, 180, "both queries to process the events")
        assert job.poll() is None, last_log_line(log)
        (tmp_path / "status" / NAME / "STOP").touch()
        assert job.wait(120) == EXIT_OK, last_log_line(log)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert "stopped gracefully" in last_log_line(log)
    assert read_status(tmp_path, NAME)["state"] == "stopped"
    # b at 3:20 moved the watermark to 2:50: window 0 of a is complete and written.
    assert windows(spark, Path(config["sink"]["output_path"])) == [(0, "a", 2, 3.0, 2, 1.0, 2.0)]
    assert len(spark.read.parquet(config["sink"]["quarantine_path"]).collect()) == 1
    text = log.read_text()
    key = dict(part.split("=", 1) for part in eventhub.connection_string.split(";") if "=" in part)
    assert key["SharedAccessKey"] not in text, "the SAS key leaked into the log"
    assert ROCKSDB_PROVIDER in text, "the job logs the state store provider it runs with"


@pytest.mark.slow
def test_kill_9_at_random_moments_keeps_every_window_exactly_once(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path
) -> None:
    """Three kill -9 of the driver while it aggregates, each followed by a restart: every window
    is written once with exact sums (a watermark wider than the data, so nothing is late)."""
    rng = random.Random(5)
    config = aggregate_config(
        tmp_path,
        eventhub,
        trigger={"availableNow": False, "processingTime": "1 second"},
        source={"connection_string_env": ENV_VAR, "max_events_per_trigger": 40},
        aggregation={"watermark": "1 hour"},
        runtime={
            "heartbeat_interval": "1 second",
            "poll_interval": "200 ms",
            "lease_duration": "10 minutes",
        },
    )
    path = write_config(tmp_path / "job.yaml", config)
    env = {ENV_VAR: eventhub.connection_string}
    expected: dict[tuple[int, str], list[float]] = defaultdict(list)
    bodies = []
    for n in range(1200):
        device, seconds, temp = f"d{n % 7}", n, float(n % 13)
        bodies.append(reading(device, seconds, temp))
        expected[(seconds // 60, device)].append(temp)
    eventhub.send(spread(bodies))
    status_file = tmp_path / "status" / NAME / "status.json"
    commits = tmp_path / "checkpoints" / NAME / "commits"

    def run_id() -> str | None:
        try:
            return json.loads(status_file.read_text()).get("run_id")
        except (FileNotFoundError, ValueError):
            return None

    seen: set[str | None] = {None}
    for kill in range(3):
        log = tmp_path / f"run{kill}.log"
        job = spark_submit(path, log, script=EVENTHUBS_AGGREGATE, extra_env=env)
        try:
            wait_until(
                lambda job=job: run_id() not in seen or job.poll() is not None, 120, "the query to start"
            )
            seen.add(run_id())
            before = len(log_ids(commits))
            wait_until(lambda before=before: len(log_ids(commits)) > before, 120, "a batch of this run")
            threading.Event().wait(rng.uniform(0.0, 3.0))
            assert job.poll() is None, f"run {kill} ended before its kill: {last_log_line(log)}"
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()

    log = tmp_path / "final.log"
    job = spark_submit(path, log, script=EVENTHUBS_AGGREGATE, extra_env=env)
    try:

        def read_everything() -> bool:
            try:
                progress = json.loads(status_file.read_text())["last_progress"]
                return progress["sources"][0]["end_offset"] == eventhub.expected_offsets()
            except (FileNotFoundError, ValueError, KeyError, TypeError, IndexError):
                return False

        wait_until(lambda: read_everything() or job.poll() is not None, 300, "every event to be read")
        eventhub.send({"0": [reading("closer", 4 * 3600, 0.0)]})  # moves the watermark past every window
        output = Path(config["sink"]["output_path"])

        def all_windows_written() -> bool:
            try:
                return len(windows(spark, output)) >= len(expected)
            except Exception:  # nothing committed yet
                return False

        wait_until(lambda: all_windows_written() or job.poll() is not None, 180, "every window to be written")
        (tmp_path / "status" / NAME / "STOP").touch()
        assert job.wait(120) == EXIT_OK, last_log_line(log)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    rows = windows(spark, output)
    assert len({(r[0], r[1]) for r in rows}) == len(rows), "a window was written twice"
    assert rows == sorted(
        (minute, device, len(temps), sum(temps), len(temps), min(temps), max(temps))
        for (minute, device), temps in expected.items()
    )
