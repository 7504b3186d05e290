"""Checkpoints interchangeable with azure-event-hubs-spark, checked with the Scala side's own JSON code.

The Scala connector reads and writes its offsets with json4s (``JsonUtils.partitionSeqNos``):
``Serialization.write`` of a ``mutable.HashMap[String, mutable.HashMap[Int, Long]]``, and
``Serialization.read[Map[String, Map[Int, Long]]]`` back, with ``Serialization.formats(NoTypeHints)``.
Spark's JVM ships json4s, so these tests call exactly those functions through Py4J: the Scala
connector's jar itself cannot run on Spark 4 (Scala 2.12), and there is no Spark 3 here.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from .conftest import Hub
from .test_stream_read import EARLIEST, run_available_now

pytestmark = pytest.mark.integration

# OffsetSeqMetadata as Spark 3.3-3.5 wrote it for a stateless query (pinned SQL confs).
SPARK3_METADATA = json.dumps(
    {
        "batchWatermarkMs": 0,
        "batchTimestampMs": 1700000000000,
        "conf": {
            "spark.sql.streaming.stateStore.providerClass": (
                "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
            ),
            "spark.sql.streaming.join.stateFormatVersion": "2",
            "spark.sql.streaming.stateStore.compression.codec": "lz4",
            "spark.sql.streaming.stateStore.rocksdb.formatVersion": "5",
            "spark.sql.streaming.statefulOperator.useStrictDistribution": "true",
            "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "2",
            "spark.sql.streaming.multipleWatermarkPolicy": "min",
            "spark.sql.streaming.aggregation.stateFormatVersion": "2",
            "spark.sql.shuffle.partitions": "200",
        },
    },
    separators=(",", ":"),
)


class Json4s:
    """json4s in Spark's JVM, called the way the Scala connector's JsonUtils calls it."""

    def __init__(self, spark: Any) -> None:
        self.jvm = spark._jvm
        self.formats = self.jvm.org.json4s.jackson.Serialization.formats(
            getattr(getattr(self.jvm.org.json4s, "NoTypeHints$"), "MODULE$")
        )
        self.serialization = self.jvm.org.json4s.jackson.Serialization

    def write_partition_seq_nos(self, hub: str, seqs: dict[int, int]) -> str:
        """``JsonUtils.partitionSeqNos(map)``: nested mutable HashMaps, written by json4s."""
        inner = self.jvm.scala.collection.mutable.HashMap()
        for pid, seq in sorted(seqs.items()):
            inner.put(pid, self.jvm.java.lang.Long.valueOf(str(seq)))
        outer = self.jvm.scala.collection.mutable.HashMap()
        outer.put(hub, inner)
        return self.serialization.write(outer, self.formats)

    def read_partition_seq_nos(self, text: str) -> dict[str, dict[int, int]]:
        """``JsonUtils.partitionSeqNos(json)``: read[Map[String, Map[Int, Long]]]; raises if invalid."""
        factory = self.jvm.scala.reflect.ManifestFactory
        map_class = self.jvm.java.lang.Class.forName("scala.collection.immutable.Map")

        def args(*manifests: Any) -> Any:
            items = self.jvm.java.util.ArrayList()
            for manifest in manifests:
                items.add(manifest)
            return self.jvm.scala.jdk.javaapi.CollectionConverters.asScala(items).toList()

        string = factory.classType(self.jvm.java.lang.Class.forName("java.lang.String"))
        inner = factory.classType(map_class, factory.Int(), args(factory.Long()))
        outer = factory.classType(map_class, string, args(inner))
        parsed = self.serialization.read(text, self.formats, outer)
        result: dict[str, dict[int, int]] = {}
        hubs = parsed.keysIterator()
        while hubs.hasNext():
            hub = hubs.next()
            seqs = parsed.apply(hub)
            pids = seqs.keysIterator()
            result[hub] = {}
            while pids.hasNext():
                pid = pids.next()
                result[hub][pid] = seqs.apply(pid)
        return result

    def write_bytes(self, data: bytes) -> str:
        """What the Scala source puts in ``properties`` for a binary value (a Java byte[])."""
        return self.serialization.write(bytearray(data), self.formats)


def test_our_checkpoint_offsets_parse_under_the_scala_connectors_rules(
    eh_spark: Any, hub: Hub, tmp_path: Path
) -> None:
    hub.send_per_partition({"0": 3, "1": 12, "3": 1})
    ckpt = tmp_path / "ckpt"
    run_available_now(
        eh_spark, hub.options(**{"eventhubs.startingPosition": EARLIEST}), ckpt, tmp_path / "out"
    )
    lines = (ckpt / "offsets" / "0").read_text().splitlines()
    assert lines[0] == "v1" and len(lines) == 3  # version, metadata, our one source
    assert Json4s(eh_spark).read_partition_seq_nos(lines[2]) == {"hub1": {0: 3, 1: 12, 2: 0, 3: 1}}


def test_a_query_resumes_from_a_checkpoint_written_by_the_scala_connector(
    eh_spark: Any, hub: Hub, tmp_path: Path
) -> None:
    """A Spark 3 + azure-event-hubs-spark checkpoint (two committed batches) is picked up where it
    stopped: the next batch reads exactly the events after its last offsets, nothing before."""
    sent = hub.send_per_partition({"0": 10, "1": 10, "2": 10, "3": 10})
    json4s = Json4s(eh_spark)
    initial = json4s.write_partition_seq_nos("hub1", {0: 0, 1: 0, 2: 0, 3: 0})
    stopped_at = json4s.write_partition_seq_nos("hub1", {0: 4, 1: 10, 2: 0, 3: 7})
    assert json.loads(stopped_at) == {"hub1": {"0": 4, "1": 10, "2": 0, "3": 7}}

    ckpt = tmp_path / "ckpt"
    for folder in ("offsets", "commits", "sources/0"):
        (ckpt / folder).mkdir(parents=True)
    (ckpt / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}) + "\n")
    # OffsetSeqLog: version, metadata, one line per source (no trailing newline).
    for batch, offset in enumerate([initial, stopped_at]):
        (ckpt / "offsets" / str(batch)).write_text(f"v1\n{SPARK3_METADATA}\n{offset}")
        (ckpt / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    # The Scala source's own HDFSMetadataLog of its initial offsets: a zero byte (SPARK-19517),
    # the version line, the JSON. Python sources have no such folder; it is left alone.
    (ckpt / "sources" / "0" / "0").write_bytes(b"\x00v1\n" + initial.encode())

    out = tmp_path / "out"
    options = hub.options(**{"eventhubs.startingPosition": EARLIEST})  # ignored: the checkpoint wins
    progress = run_available_now(eh_spark, options, ckpt, out)
    assert [p["batchId"] for p in progress if p["numInputRows"]] == [2]
    expected = {f"e-0-{i}" for i in range(4, 10)} | {f"e-2-{i}" for i in range(10)}
    expected |= {f"e-3-{i}" for i in range(7, 10)}
    # The parquet sink's own log starts at batch 2 here (a migration keeps the old sink's log);
    # pyarrow reads the data files without it.
    import pyarrow.parquet as pq

    bodies = [bytes(b).decode() for b in pq.read_table(out, columns=["body"]).column("body").to_pylist()]
    assert len(bodies) == len(expected) and set(bodies) == expected and set(bodies) < sent
    assert json4s.read_partition_seq_nos((ckpt / "offsets" / "2").read_text().splitlines()[-1]) == {
        "hub1": {0: 10, 1: 10, 2: 10, 3: 10}
    }


def test_binary_property_values_match_what_the_scala_source_writes(eh_spark: Any) -> None:
    """The Scala source passes a binary value's byte[] to json4s; the reader writes the same text."""
    from pyspark_eventhubs.amqp_binary import AmqpBinary
    from pyspark_eventhubs.schema import _text

    raw = b"h\xff\x00\x80"
    assert _text(AmqpBinary(raw)) == Json4s(eh_spark).write_bytes(raw)
