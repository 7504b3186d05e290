"""Shared helpers of the jobs tests: configs, landing files, output readers, spark-submit runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from hubflow.supervision.detached_process import start_detached
from tests.support.spark_cluster import spark_env

REPO_ROOT = Path(__file__).resolve().parents[2]
JOBS_DIR = REPO_ROOT / "jobs"
FILES_TO_LAKE = JOBS_DIR / "files_to_lake.py"
EVENTHUBS_TO_LAKE = JOBS_DIR / "eventhubs_to_lake.py"


def landing_config(base: Path, **overrides: Any) -> dict[str, Any]:
    """A valid files_to_lake config under ``base`` (json, availableNow, parquet output; Delta tests set
    ``sink={"format": "delta"}``); ``overrides`` update sections."""
    (base / "landing").mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "name": "files_to_lake",
        "trigger": {"availableNow": True},
        "checkpoint_root": str(base / "checkpoints"),
        "status_root": str(base / "status"),
        "spark_conf": {"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": False},
        "runtime": {"heartbeat_interval": "1 second", "poll_interval": "200 ms"},
        "source": {
            "path": str(base / "landing"),
            "format": "json",
            "schema": "id BIGINT, name STRING",
            "max_files_per_trigger": 2,
            "archive_dir": str(base / "archive"),
            "required_columns": ["id"],
        },
        "sink": {
            "output_path": str(base / "lake" / "orders"),
            "quarantine_path": str(base / "quarantine"),
            "format": "parquet",
        },
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def write_config(path: Path, config: dict[str, Any]) -> Path:
    """Write ``config`` as YAML to ``path`` and return the path."""
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def write_json_landing_file(landing: Path, name: str, first_id: int, good: int, bad: int) -> set[int]:
    """Write ``good`` valid records (ids from ``first_id``) and ``bad`` broken ones; return the good ids.

    Broken records alternate between text that is not JSON and JSON without the required ``id``.
    """
    lines, ids = [], set()
    for offset in range(good):
        ids.add(first_id + offset)
        lines.append(json.dumps({"id": first_id + offset, "name": f"n{first_id + offset}"}))
    for index in range(bad):
        lines.append(f"not json {name} {index}" if index % 2 == 0 else json.dumps({"name": "no id"}))
    temp = landing / f".{name}.tmp"
    temp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    temp.rename(landing / name)  # appear whole, as a landing upload should
    return ids


def read_lake(spark: Any, path: str | Path) -> list[Any]:
    """Every committed row of a file-sink output (Spark reads it through _spark_metadata)."""
    return spark.read.parquet(str(path)).collect()


def read_status(base: Path, name: str = "files_to_lake") -> dict[str, Any]:
    """The job's status.json."""
    return json.loads((base / "status" / name / "status.json").read_text(encoding="utf-8"))


def log_ids(directory: Path) -> list[int]:
    """The batch ids logged in a checkpoint's ``offsets`` or ``commits`` folder."""
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def spark_submit_path() -> str:
    """pyspark's own spark-submit script."""
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")


def cluster_submit(master: str, *args: str) -> list[str]:
    """spark-submit of ``args`` on the loopback standalone cluster ``master``: one core, a small
    executor, no UI, and the jobs runtime on the executors' Python path."""
    return [
        spark_submit_path(),
        "--master",
        master,
        "--total-executor-cores",
        "1",
        "--executor-memory",
        "512m",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        f"spark.executorEnv.PYTHONPATH={JOBS_DIR}",
        *args,
    ]


def spark_submit(
    config: Path,
    log_path: Path,
    extra_args: list[str] | None = None,
    script: Path = FILES_TO_LAKE,
    extra_env: dict[str, str] | None = None,
    script_args: list[str] | None = None,
) -> subprocess.Popen:
    """Start ``spark-submit <script> --config <config> [script_args]`` on local[2], output going to
    ``log_path``.

    The process leads its own session, so ``os.killpg(process.pid, SIGKILL)`` kills the driver JVM,
    the Python driver and the Python workers at once, as a lost machine would.
    """
    command = [
        spark_submit_path(),
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        *(extra_args or []),
        str(script),
        "--config",
        str(config),
        *(script_args or []),
    ]
    env = spark_env({"PYTHONPATH": str(JOBS_DIR), **(extra_env or {})})
    return start_detached(command, log_path, env, append=False)


#: A line the job's own Python logging wrote (``hubflow_jobs.runtime.runner.configure_logging``'s
#: format: ``2026-11-27 22:40:16,123 ERROR hubflow_jobs: ...``); Spark's JVM lines read
#: ``26/11/27 22:40:16 INFO SparkContext: ...``.
_JOB_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ hubflow_jobs(\.[\w.]+)?: ")


def last_log_line(log_path: Path) -> str:
    """The last line the job itself logged in a run's log: its one-line outcome once the run ended.

    Not the file's physical last line: the run's JVM is spark-submit's parent process and may still
    log (its shutdown hooks) after the Python driver's last line; a log without any job line (the
    run died before its logging started) gives its last non-empty line.
    """
    lines = [
        line for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()
    ]
    own = [line for line in lines if _JOB_LINE.match(line)]
    return own[-1] if own else (lines[-1] if lines else "")


def python_job(config: Path, script: Path = FILES_TO_LAKE) -> subprocess.CompletedProcess:
    """Run a job script with plain python (enough for what happens before Spark starts)."""
    env = spark_env({"PYTHONPATH": str(JOBS_DIR)})
    return subprocess.run(
        [sys.executable, str(script), "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


class EmulatedHub:
    """One hub of the embedded emulator: its name, connection string and a batched sender."""

    def __init__(self, name: str, connection_string: str, partitions: int) -> None:
        self.name = name
        self.connection_string = connection_string
        self.partitions = partitions
        self.sent_per_partition = dict.fromkeys(map(str, range(partitions)), 0)

    def send(self, bodies_per_partition: dict[str, list[bytes]]) -> None:
        """Send the bodies to their partitions with the SDK's batched producer."""
        from azure.eventhub import EventData, EventHubProducerClient

        producer = EventHubProducerClient.from_connection_string(self.connection_string)
        try:
            for partition, bodies in bodies_per_partition.items():
                batch = producer.create_batch(partition_id=partition)
                for body in bodies:
                    event = EventData(body)
                    try:
                        batch.add(event)
                    except ValueError:
                        producer.send_batch(batch)
                        batch = producer.create_batch(partition_id=partition)
                        batch.add(event)
                if len(batch):
                    producer.send_batch(batch)
                self.sent_per_partition[partition] += len(bodies)
        finally:
            producer.close()

    def send_numbered(self, first: int, count: int) -> set[bytes]:
        """Send events with bodies ``b"event-<n>"`` for n in [first, first + count), round robin."""
        per_partition: dict[str, list[bytes]] = {str(p): [] for p in range(self.partitions)}
        for number in range(first, first + count):
            per_partition[str(number % self.partitions)].append(f"event-{number}".encode())
        self.send(per_partition)
        return {body for bodies in per_partition.values() for body in bodies}

    def expected_offsets(self) -> dict[str, dict[str, int]]:
        """The connector's checkpoint offset once everything sent was read: next seqNo per partition."""
        return {self.name: {p: n for p, n in self.sent_per_partition.items() if n}}


def eventhubs_config(base: Path, hub: EmulatedHub, env_var: str, **overrides: Any) -> dict[str, Any]:
    """A valid eventhubs_to_lake config under ``base`` reading ``hub`` (availableNow, parquet output;
    Delta tests set ``sink={"format": "delta"}``)."""
    config: dict[str, Any] = {
        "name": "eventhubs_to_lake",
        "trigger": {"availableNow": True},
        "checkpoint_root": str(base / "checkpoints"),
        "status_root": str(base / "status"),
        "spark_conf": {"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": False},
        "runtime": {"heartbeat_interval": "1 second", "poll_interval": "200 ms"},
        "source": {"connection_string_env": env_var, "max_events_per_trigger": 1000},
        "sink": {"output_path": str(base / "lake" / "bronze"), "format": "parquet"},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def event_count(connection_string: str) -> int:
    """How many events the hub holds, from its partitions' sequence numbers (no receiving)."""
    from azure.eventhub import EventHubConsumerClient

    client = EventHubConsumerClient.from_connection_string(connection_string, "$Default")
    try:
        total = 0
        for pid in client.get_partition_ids():
            props = client.get_partition_properties(pid)
            if not props["is_empty"]:
                total += props["last_enqueued_sequence_number"] - props["beginning_sequence_number"] + 1
        return total
    finally:
        client.close()


def receive_all(connection_string: str, timeout: float = 60) -> list[tuple[str, Any]]:
    """Every event of the hub as (partition id, EventData), read from the start with the SDK."""
    from azure.eventhub import EventHubConsumerClient

    expected = event_count(connection_string)
    received: list[tuple[str, Any]] = []
    # Greedy: one consumer claims every partition at once instead of one per balancing round.
    client = EventHubConsumerClient.from_connection_string(
        connection_string, "$Default", load_balancing_strategy="greedy"
    )

    def on_event(context: Any, event: Any) -> None:
        if event is not None:
            received.append((context.partition_id, event))

    thread = threading.Thread(
        target=client.receive, kwargs={"on_event": on_event, "starting_position": "-1"}, daemon=True
    )
    thread.start()
    deadline = time.monotonic() + timeout
    while len(received) < expected and time.monotonic() < deadline:
        time.sleep(0.1)
    client.close()
    thread.join(30)
    assert len(received) == expected, f"received {len(received)} of {expected} events"
    return received


def files_to_lake_config(path: Path) -> Any:
    """The built-in files_to_lake's config read from ``path`` (old keys or new) by its model."""
    from hubflow.config import load_config
    from hubflow_jobs.builtins.files_to_lake import FilesToLakeConfig

    return load_config(path, FilesToLakeConfig)


def lake_tables(config: Any) -> tuple[str, str]:
    """The output and quarantine tables of a files_to_lake config."""
    from hubflow_jobs.builtins.files_to_lake import SINK

    sink = config.sinks[SINK]
    return sink.output_path, sink.quarantine_path


def run_files_to_lake(spark: Any, config: Any, stop: Any = None, **kwargs: Any) -> tuple[int, str]:
    """A files_to_lake run on ``spark`` (the shared runtime, as its entry script runs it)."""
    from hubflow_jobs.pipeline.job import start_function
    from hubflow_jobs.runtime.runner import run_job
    from hubflow_jobs.runtime.stop import StopRequest

    return run_job(spark, config, start_function("files_to_lake"), stop or StopRequest(), **kwargs)


def backfill_files(spark: Any, config: Any, start: Any, end: Any) -> dict[str, int]:
    """files_to_lake's backfill of ``[start, end)``, as ``jobs/backfill.py`` runs it: the window
    checked first (WindowError without Spark), then the pipeline's backfill; its counts."""
    from hubflow.applications import pipeline_reference
    from hubflow_jobs.pipeline.backfill import backfill_pipeline, check_window
    from hubflow_jobs.pipeline.binding import bind, load_function

    check_window(config, start, end)
    reference = pipeline_reference("files_to_lake")
    assert reference is not None
    binding = bind(load_function(reference), reference, list(config.sources))
    counts = backfill_pipeline(spark, config, binding, start, end)
    return {key: counts[key] for key in ("files", "read", "written", "quarantined")}


def landing_archive(config: Any) -> str:
    """Where Spark's ``cleanSource=archive`` puts a files_to_lake config's landing files."""
    from hubflow.config import archive_root
    from hubflow_jobs.builtins.files_to_lake import SOURCE

    source = config.sources[SOURCE]
    return archive_root(source.path, source.archive_dir)
