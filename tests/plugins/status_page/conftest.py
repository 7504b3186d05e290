"""A registry of jobs that really ran on the local Spark, shared by the status page tests.

``status_world`` (built once per test session, ~20 s) holds:

* ``events_history``: Event Hubs stream (emulator) of 130 events in batches of 50, with
  ``progress_history.jsonl``;
* ``events_plain``: a copy of that run's checkpoint and status.json without the history file, so
  the page must derive its chart points from the checkpoint and status.json;
* ``orders_files``: a JSON file stream, 2 files of 4 rows, one file per batch;
* ``never_ran``: registered, nothing on disk yet;
* ``broken_config``: its config file does not exist.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.plugins.status_page.streams import EARLIEST, job_config, run_job, write_registry

EVENT_COUNTS = {"0": 60, "1": 70}  # 130 events: batches of 50, 50, 30
BATCH_SIZE = 50
#: A connection string with a key: it must never show on the page.
SECRET = "S3cr3tK3yValue="


@dataclass
class StatusWorld:
    """The registry file and what each job's real run reported."""

    base: Path
    registry: Path
    progress: dict[str, list[dict[str, Any]]]


@pytest.fixture(scope="session")
def status_world(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StatusWorld]:
    from azure.eventhub import EventData, EventHubProducerClient

    from eventhubs_emulator import Emulator, EmulatorConfig
    from pyspark_eventhubs import DefaultSource, register_data_source

    base = tmp_path_factory.mktemp("status-world")
    register_data_source(spark, DefaultSource)
    config = EmulatorConfig.single_hub("hub1", partition_count=2)
    progress: dict[str, list[dict[str, Any]]] = {}
    with Emulator(config, port=0) as emulator:
        connection = emulator.connection_string("hub1")
        producer = EventHubProducerClient.from_connection_string(connection)
        try:
            for partition, count in EVENT_COUNTS.items():
                batch = producer.create_batch(partition_id=partition)
                for i in range(count):
                    batch.add(EventData(f"event-{partition}-{i}"))
                producer.send_batch(batch)
        finally:
            producer.close()
        options = {
            "eventhubs.connectionString": connection,
            "eventhubs.startingPosition": EARLIEST,
            "maxEventsPerTrigger": str(BATCH_SIZE),
        }
        df = spark.readStream.format("eventhubs").options(**options).load()
        progress["events_history"] = run_job(spark, base, "events_history", df, with_history=True)
        from pyspark_eventhubs.receiver_cache import RECEIVERS

        RECEIVERS.close_all()

    shutil.copytree(base / "checkpoints" / "events_history", base / "checkpoints" / "events_plain")
    (base / "status" / "events_plain").mkdir(parents=True)
    shutil.copy(base / "status" / "events_history" / "status.json", base / "status" / "events_plain")
    progress["events_plain"] = progress["events_history"]

    landing = base / "landing" / "orders"
    landing.mkdir(parents=True)
    for file_number in range(2):
        lines = [f'{{"id": {file_number * 4 + i}, "name": "n{i}"}}' for i in range(4)]
        (landing / f"orders-{file_number}.json").write_text("\n".join(lines) + "\n")
    files_df = (
        spark.readStream.schema("id BIGINT, name STRING").option("maxFilesPerTrigger", 1).json(str(landing))
    )
    progress["orders_files"] = run_job(spark, base, "orders_files", files_df, with_history=False)

    # The driver's variable holds the secret; Airflow's side reads the config without it.
    eventhubs_source = {"connection_string_env": "STATUS_WORLD_EVENTHUBS_CONNECTION"}
    entries = []
    for name, source in (
        ("events_history", eventhubs_source),
        ("events_plain", eventhubs_source),
        ("orders_files", {"path": str(landing), "format": "json"}),
        ("never_ran", {"path": str(base / "landing" / "none")}),
    ):
        entries.append(
            {
                "name": name,
                "application": "eventhubs_to_lake" if name.startswith("events") else "files_to_lake",
                "config": str(job_config(base, name, source)),
                "mode": "streaming",
                "stalled_after": "1 hour",
            }
        )
    entries.append(
        {
            "name": "broken_config",
            "application": "files_to_lake",
            "config": str(base / "configs" / "missing.yaml"),
            "mode": "scheduled",
            "schedule": "@hourly",
        }
    )
    yield StatusWorld(base=base, registry=write_registry(base, entries), progress=progress)
