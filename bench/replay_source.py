"""``format("arrow_replay")``: a Python streaming source that costs almost nothing in Python.

The ceiling side of ``bench/kafka_vs_connector.py --broker``: the connector's own Arrow record
batches for the benchmark's events, captured once from the emulator (:func:`capture`) into one Arrow
IPC file per partition, are handed back to Spark by a Python data source whose ``read()`` only maps
a file and yields its batches (no network, no decoding). Whatever that side costs is Spark's path
for a Python source (the Python worker, the Arrow hand-off, rows to parquet), which every Python
source pays and the connector cannot go below.

Driver: offsets are ``{"files": n}`` (all or nothing). Executor: ``read()`` maps one file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from pyspark_eventhubs.schema import EVENTHUBS_SCHEMA


def capture(conn: str, directory: Path) -> int:
    """Read every event of the hub of ``conn`` with the connector into ``directory/<pid>.arrow``;
    returns the number of events."""
    from pyspark_eventhubs.batch_reader import EventHubsBatchReader
    from pyspark_eventhubs.options import parse_options
    from pyspark_eventhubs.receiver_cache import read_range

    options = parse_options({"eventhubs.connectionString": conn})
    start, end = EventHubsBatchReader(options).resolve_ranges()
    directory.mkdir(parents=True, exist_ok=True)
    events = 0
    for pid in start:
        batches = list(read_range(options, pid, start[pid], end[pid]))
        with pa.OSFile(str(directory / f"{pid}.arrow"), "wb") as sink:
            with pa.ipc.new_file(sink, batches[0].schema) as writer:
                for batch in batches:
                    writer.write_batch(batch)
                    events += batch.num_rows
    return events


@dataclass
class ReplayFile(InputPartition):
    path: str

    def __post_init__(self) -> None:
        self.value = None


class ReplayStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, directory: str) -> None:
        self.files = sorted(str(p) for p in Path(directory).glob("*.arrow"))

    def initialOffset(self) -> dict:
        return {"files": 0}

    def latestOffset(self, start: dict, limit: object) -> dict:
        return {"files": len(self.files)}

    def prepareForTriggerAvailableNow(self) -> None:
        """All files are there from the start."""

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [ReplayFile(path) for path in self.files[start["files"] : end["files"]]]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ReplayFile)
        with pa.memory_map(partition.path) as source:
            reader = pa.ipc.open_file(source)
            for index in range(reader.num_record_batches):
                yield reader.get_batch(index)

    def commit(self, end: dict) -> None:
        """Nothing to keep."""


class ArrowReplaySource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "arrow_replay"

    def schema(self) -> StructType:
        return EVENTHUBS_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ReplayStreamReader(self.options["path"])


def register(spark: object) -> None:
    """Register ``arrow_replay`` with ``spark``; its classes travel to the workers by value."""
    import sys

    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(ArrowReplaySource)  # type: ignore[attr-defined]
