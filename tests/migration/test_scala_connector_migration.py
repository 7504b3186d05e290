"""Migration from Microsoft's Scala Event Hubs connector, run for real (issue #29).

One user script (``user_stream.py``, written as azure-event-hubs-spark's PySpark guide shows) runs a
stream with spark-submit on Spark 3.5 with the connector's jar (azure-eventhubs-spark_2.12 2.3.22, the
unmodified Java SDK azure-eventhubs 3.3 and proton-j) against the emulator, is stopped part-way, and
continues on Spark 4.2 with hubflow's connector on the same checkpoint folder, migrated as
docs/connector.md says (the jar gone, the ``EventHubsUtils.encrypt`` call dropped): every event is in
the output exactly once, by identity. Beside it, the same time-window batch read through both gives
the same rows and schema.

The Java SDK speaks only AMQPS on port 5671 of the endpoint's host (``ConnectionHandler`` has the
port fixed). So the emulator's TLS port is 5671 on a random loopback address 127.x.y.z of this test
(the certificate names it): nothing else binds there; the test skips, saying so, if it is taken.
The JVM trusts the emulator's CA through a truststore (``-Djavax.net.ssl.trustStore``), hubflow's
connector through ``eventhubs.connectionVerify``.

Slow (about 3-4 minutes: four spark-submits) and needs the Spark 3.5 virtualenv: ``make migration-env``
(``make test-all`` makes it); skipped with that message where it is missing.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from azure.eventhub import EventData, EventHubProducerClient

from eventhubs_emulator import Emulator
from eventhubs_emulator.config import EmulatorConfig
from tests.support.processes import start_background, stop_process, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.integration]

REPO_ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SPARK35 = REPO_ROOT / ".venv-spark35"
MAIN_VENV = REPO_ROOT / ".venv"
AMQPS_PORT = 5671  # the Java SDK's only port (com.microsoft.azure.eventhubs.impl.ConnectionHandler)
HUB = "hub1"
TRUSTSTORE_PASSWORD = "changeit"  # guards nothing: a store holding only the test CA's certificate
#: Process starts and batches on a loaded 2-core machine: generous.
DEADLINE_S = 300

if not (SPARK35 / "bin" / "spark-submit").exists():
    pytest.skip(
        f"the Spark 3.5 virtualenv with the Scala Event Hubs connector is missing ({SPARK35}): "
        "run `make migration-env` (`make test-all` makes it)",
        allow_module_level=True,
    )


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    """The emulator with its TLS port on 5671 of a loopback address of this test's own."""
    host = f"127.{random.randint(100, 250)}.{random.randint(1, 250)}.{random.randint(2, 250)}"
    config = EmulatorConfig.single_hub(
        HUB, partition_count=2, consumer_groups=["cg1"], tls_port=AMQPS_PORT, tls_dir=str(tmp_path / "tls")
    )
    emu = Emulator(config, host=host, port=0)
    try:
        emu.start()
    except Exception as exc:
        if "already in use" in str(exc):
            pytest.skip(f"port {AMQPS_PORT} on {host} is taken (the Java SDK can use no other): {exc}")
        raise
    try:
        yield emu
    finally:
        emu.stop()


def _service_connection_string(emu: Emulator) -> str:
    """The connection string as for the service: TLS on 5671 of the emulator's host."""
    plain = emu.config.connection_string(emu.host, AMQPS_PORT, HUB)
    return plain.replace(";UseDevelopmentEmulator=true", "")


def _truststore(emu: Emulator, folder: Path) -> Path:
    """A PKCS12 truststore holding the emulator's CA, for the JVM (keytool from ca.pem)."""
    store = folder / "truststore.p12"
    subprocess.run(
        ["keytool", "-importcert", "-noprompt", "-alias", "hubflow-emulator-ca",
         "-file", str(emu.ca_certificate),
         "-keystore", str(store), "-storetype", "PKCS12", "-storepass", TRUSTSTORE_PASSWORD],
        check=True, capture_output=True,
    )  # fmt: skip
    return store


def _send(emu: Emulator, ids_by_partition: dict[str, list[str]]) -> None:
    """Send events whose ``id`` property (and body) is unique, to the given partitions (plain port)."""
    with EventHubProducerClient.from_connection_string(emu.connection_string(HUB)) as producer:
        for partition, ids in ids_by_partition.items():
            batch = producer.create_batch(partition_id=partition)
            for event_id in ids:
                event = EventData(f"body-{event_id}")
                event.properties = {"id": event_id}
                batch.add(event)
            producer.send_batch(batch)


def _migrated(script: Path, folder: Path) -> Path:
    """The user's script after the migration guide's one change (the encrypt call dropped)."""
    text = script.read_text()
    old, new = (
        "sc._jvm.org.apache.spark.eventhubs.EventHubsUtils.encrypt(connectionString)",
        "connectionString",
    )
    assert text.count(old) == 1
    target = folder / f"migrated_{script.name}"
    target.write_text(text.replace(old, new))
    return target


def _spark35_command(script: Path, truststore: Path) -> tuple[list[str], dict[str, str]]:
    trust = (
        f"-Djavax.net.ssl.trustStore={truststore} -Djavax.net.ssl.trustStorePassword={TRUSTSTORE_PASSWORD} "
        "-Djavax.net.ssl.trustStoreType=PKCS12"
    )
    command = [
        str(SPARK35 / "bin" / "spark-submit"), "--master", "local[2]",
        "--conf", f"spark.driver.extraJavaOptions={trust}",
        "--conf", f"spark.executor.extraJavaOptions={trust}",
        str(script),
    ]  # fmt: skip
    python = str(SPARK35 / "bin" / "python")
    return command, _env(python, EVENTHUBS_EXTRA_OPTIONS="{}")


def _spark42_command(script: Path, emu: Emulator) -> tuple[list[str], dict[str, str]]:
    command = [str(MAIN_VENV / "bin" / "spark-submit"), "--master", "local[2]", str(script)]
    extra = json.dumps({"eventhubs.connectionVerify": str(emu.ca_certificate)})
    return command, _env(str(MAIN_VENV / "bin" / "python"), EVENTHUBS_EXTRA_OPTIONS=extra)


def _env(python: str, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYTHONPATH")}
    env.update(PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python, SPARK_LOCAL_IP="127.0.0.1", **settings)
    return env


def _log_tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:] if log.exists() else "(no log)"


def _committed_batches(checkpoint: Path) -> list[int]:
    folder = checkpoint / "commits"
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else []


def _committed_ids(output: Path) -> list[str]:
    """The ``id`` of every row in the files the parquet sink committed (its _spark_metadata log)."""
    files: list[str] = []
    metadata = output / "_spark_metadata"
    if not metadata.exists():
        return []
    for entry in sorted(metadata.iterdir(), key=lambda p: p.name):
        if entry.name.startswith("."):
            continue
        for line in entry.read_text().splitlines()[1:]:
            record = json.loads(line)
            if record["action"] == "add":
                files.append(record["path"].removeprefix("file://"))
    ids: list[str] = []
    for path in dict.fromkeys(files):  # a .compact file repeats the entries before it
        ids += pq.read_table(path).column("id").to_pylist()
    return ids


def _run_stream_until(
    command: list[str], env: dict[str, str], log: Path, stop_file: Path, ready: object, what: str
) -> None:
    """Run the user's stream until ``ready()`` holds, then ask it to stop (the stop file) and wait for it.

    The Scala connector's JVM does not exit after ``spark.stop()`` (the Java SDK's non-daemon threads),
    so once the script says it stopped, its process group gets SIGTERM (Spark's shutdown hooks run).
    """
    proc = start_background(command, log, env)
    try:

        def condition() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"{what} ended early (exit {proc.returncode}):\n{_log_tail(log)}")
            return bool(ready())

        wait_until(condition, DEADLINE_S, what)
        stop_file.touch()
        wait_until(
            lambda: "USER_STREAM_STOPPED" in log.read_text(errors="replace") or proc.poll() is not None,
            DEADLINE_S,
            f"{what} to stop",
        )
        assert "USER_STREAM_STOPPED" in log.read_text(errors="replace"), _log_tail(log)
    finally:
        stop_process(proc, timeout=60)
        stop_file.unlink(missing_ok=True)


def test_a_stream_started_on_the_scala_connector_continues_on_hubflows_exactly_once(
    emulator: Emulator, tmp_path: Path
) -> None:
    started = time.monotonic()
    output, checkpoint, stop_file = tmp_path / "out", tmp_path / "checkpoint", tmp_path / "stop"
    settings = {
        "EVENTHUBS_CONNECTION_STRING": _service_connection_string(emulator),
        "OUTPUT_PATH": str(output),
        "CHECKPOINT_PATH": str(checkpoint),
        "STOP_FILE": str(stop_file),
    }
    first = {p: [f"a-{p}-{i}" for i in range(30)] for p in ("0", "1")}
    later = {p: [f"b-{p}-{i}" for i in range(10)] for p in ("0", "1")}
    _send(emulator, first)

    # Run 1: Spark 3.5 with the jar, 10 events a batch; stopped after two batches (of six).
    command, env = _spark35_command(HERE / "user_stream.py", _truststore(emulator, tmp_path))
    log1 = tmp_path / "run1.log"
    _run_stream_until(
        command,
        {**env, **settings},
        log1,
        stop_file,
        lambda: len(_committed_batches(checkpoint)) >= 2,
        "run 1",
    )
    assert "USER_STREAM_STARTED 3.5." in log1.read_text()
    assert (checkpoint / "sources" / "0" / "0").exists(), "the Scala (DSv1) source's own metadata"
    run1_ids = _committed_ids(output)
    run1_batches = _committed_batches(checkpoint)
    run1_offsets = {b: (checkpoint / "offsets" / str(b)).read_bytes() for b in run1_batches}
    sent_first = {i for ids in first.values() for i in ids}
    assert run1_ids and set(run1_ids) < sent_first, "run 1 was stopped part-way, with a backlog left"

    _send(emulator, later)
    everything = sent_first | {i for ids in later.values() for i in ids}

    # Run 2: Spark 4.2, hubflow's connector, the migrated script, the same checkpoint and output.
    command, env = _spark42_command(_migrated(HERE / "user_stream.py", tmp_path), emulator)
    log2 = tmp_path / "run2.log"
    _run_stream_until(
        command,
        {**env, **settings},
        log2,
        stop_file,
        lambda: set(_committed_ids(output)) >= everything,
        "run 2",
    )
    assert "USER_STREAM_STARTED 4.2." in log2.read_text()

    ids = _committed_ids(output)
    duplicates = {i: n for i, n in Counter(ids).items() if n > 1}
    assert not duplicates, f"events written twice: {duplicates}"
    assert set(ids) == everything
    # Run 2 continued the checkpoint's query: its batches follow run 1's in the same folder, whose
    # offsets it kept as they were. (A run 2 on a new checkpoint can give the same output: the
    # parquet sink skips batch ids its _spark_metadata already holds, and the batches are cut alike.)
    run2_batches = [b for b in _committed_batches(checkpoint) if b > run1_batches[-1]]
    assert run2_batches and run2_batches[0] == run1_batches[-1] + 1, "run 2 did not continue the checkpoint"
    assert {b: (checkpoint / "offsets" / str(b)).read_bytes() for b in run1_batches} == run1_offsets
    last_offsets = (checkpoint / "offsets" / str(_committed_batches(checkpoint)[-1])).read_text()
    assert json.loads(last_offsets.splitlines()[-1]) == {HUB: {"0": 40, "1": 40}}
    print(
        f"migration: run 1 wrote {len(run1_ids)} events in batches {run1_batches}, run 2 the other "
        f"{len(ids) - len(run1_ids)} in batches {run2_batches}; {time.monotonic() - started:.0f} s"
    )


def _last_enqueued_ms(emu: Emulator) -> int:
    """The latest enqueued time (ms) of the hub's partitions, as the SDK reads it."""
    from azure.eventhub import EventHubConsumerClient

    with EventHubConsumerClient.from_connection_string(emu.connection_string(HUB), "cg1") as consumer:
        return max(
            int(consumer.get_partition_properties(p)["last_enqueued_time_utc"].timestamp() * 1000)
            for p in consumer.get_partition_ids()
        )


def _instant(ms: int) -> str:
    """EventPosition JSON's ``enqueuedTime``: milliseconds, as the Scala connector reads them (json4s'
    ``yyyy-MM-dd'T'HH:mm:ss.SSS'Z'``: six fraction digits are taken as that many milliseconds)."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _after(ms: int) -> None:
    """Wait until the clock is past ``ms`` (so the next events are enqueued strictly later)."""
    wait_until(lambda: time.time() * 1000 > ms + 5, 10, "the clock to pass a window bound")


def _run_batch(command: list[str], env: dict[str, str], window: dict[str, str], name: Path) -> dict:
    """Run ``user_batch.py`` to its result (then stop its JVM, which the Scala connector keeps alive)."""
    result, log = name.with_suffix(".json"), name.with_suffix(".log")
    proc = start_background(command, log, {**env, **window, "RESULT_PATH": str(result)})
    try:
        # The script opens the result file before it writes it, and SIGTERM (below) ends it without
        # flushing: judge the file once the script says it is written (USER_BATCH_DONE), not once it exists.
        wait_until(
            lambda: "USER_BATCH_DONE" in log.read_text(errors="replace") or proc.poll() is not None,
            DEADLINE_S,
            f"the batch read {name.name}",
        )
        assert "USER_BATCH_DONE" in log.read_text(errors="replace") and result.exists(), _log_tail(log)
    finally:
        stop_process(proc, timeout=60)
    return json.loads(result.read_text())


def test_the_same_time_window_batch_read_gives_the_same_rows_and_schema(
    emulator: Emulator, tmp_path: Path
) -> None:
    before = {p: [f"before-{p}-{i}" for i in range(3)] for p in ("0", "1")}
    inside = {p: [f"in-{p}-{i}" for i in range(4)] for p in ("0", "1")}
    after = {p: [f"after-{p}-{i}" for i in range(3)] for p in ("0", "1")}
    _send(emulator, before)
    start_ms = _last_enqueued_ms(emulator) + 1
    _after(start_ms)
    _send(emulator, inside)
    end_ms = _last_enqueued_ms(emulator) + 1
    _after(end_ms)
    _send(emulator, after)
    # No event at either bound, so the Scala connector's "after the time" and hubflow's "at or after"
    # select the same events: (start, end].
    window = {
        "EVENTHUBS_CONNECTION_STRING": _service_connection_string(emulator),
        "WINDOW_START": _instant(start_ms),
        "WINDOW_END": _instant(end_ms),
    }

    scala = _run_batch(
        *_spark35_command(HERE / "user_batch.py", _truststore(emulator, tmp_path)), window, tmp_path / "scala"
    )
    hubflow = _run_batch(
        *_spark42_command(_migrated(HERE / "user_batch.py", tmp_path), emulator), window, tmp_path / "hubflow"
    )
    assert scala["spark"].startswith("3.5.") and hubflow["spark"].startswith("4.2.")
    assert hubflow["schema"] == scala["schema"]

    def by_id(rows: list[dict]) -> dict[str, dict]:
        return {row["properties"]["id"]: row for row in rows}

    expected = {i for ids in inside.values() for i in ids}
    assert len(scala["rows"]) == len(expected) and set(by_id(scala["rows"])) == expected
    assert len(hubflow["rows"]) == len(expected)
    assert by_id(hubflow["rows"]) == by_id(scala["rows"])
