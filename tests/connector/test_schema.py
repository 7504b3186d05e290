"""Read schema and the conversion of received AMQP messages into Arrow record batches."""

from __future__ import annotations

import datetime

import pyarrow as pa
from azure.eventhub._pyamqp.message import Message, Properties

from pyspark_eventhubs.schema import EVENTHUBS_SCHEMA, arrow_schema, messages_to_record_batch


def _message(seq: int, **extra: object) -> Message:
    annotations = {
        b"x-opt-sequence-number": seq,
        b"x-opt-offset": str(seq * 100).encode(),
        b"x-opt-enqueued-time": 1_700_000_000_123 + seq,
    }
    annotations.update(extra.pop("annotations", {}))  # type: ignore[arg-type]
    return Message(data=[b"body-", str(seq).encode()], message_annotations=annotations, **extra)  # type: ignore[arg-type]


def test_schema_matches_the_scala_connector() -> None:
    assert [(f.name, f.dataType.simpleString()) for f in EVENTHUBS_SCHEMA.fields] == [
        ("body", "binary"),
        ("partition", "string"),
        ("offset", "string"),
        ("sequenceNumber", "bigint"),
        ("enqueuedTime", "timestamp"),
        ("publisher", "string"),
        ("partitionKey", "string"),
        ("properties", "map<string,string>"),
        ("systemProperties", "map<string,string>"),
    ]


def test_record_batch_has_sparks_exact_arrow_schema_and_values() -> None:
    messages = [
        _message(
            5,
            annotations={b"x-opt-partition-key": b"user-1", b"x-opt-publisher": b"dev"},
            application_properties={b"kind": b"click", "n": 3, "ok": True},
            properties=Properties(message_id=b"m-5", content_type=b"application/json"),
        ),
        _message(6),
    ]
    batch = messages_to_record_batch("3", messages)
    assert batch.schema.equals(arrow_schema())
    assert batch.schema.field("enqueuedTime").type == pa.timestamp("us", tz="UTC")
    rows = batch.to_pylist()
    first, second = rows
    assert first["body"] == b"body-5" and second["body"] == b"body-6"
    assert first["partition"] == "3"
    assert first["offset"] == "500"
    assert first["sequenceNumber"] == 5
    assert first["enqueuedTime"] == datetime.datetime(2023, 11, 14, 22, 13, 20, 128000, tzinfo=datetime.UTC)
    assert first["partitionKey"] == "user-1" and second["partitionKey"] is None
    assert first["publisher"] == "dev"
    assert dict(first["properties"]) == {"kind": "click", "n": "3", "ok": "true"}
    system = dict(first["systemProperties"])
    assert system["message-id"] == "m-5" and system["content-type"] == "application/json"
    assert system["x-opt-partition-key"] == "user-1"
    assert not {"x-opt-offset", "x-opt-sequence-number", "x-opt-enqueued-time"} & set(system)
    assert second["properties"] == []


def test_empty_input_gives_an_empty_batch_with_the_schema() -> None:
    batch = messages_to_record_batch("0", [])
    assert batch.num_rows == 0 and batch.schema.equals(arrow_schema())


def test_columns_built_from_buffers_equal_pyarrows_own_and_keep_pandas_out() -> None:
    """The hand-built columns (arrow_columns.py) hold what pyarrow.array would build, and building
    them does not import pandas (a fresh interpreter, as a new Spark Python worker is)."""
    import subprocess
    import sys

    import pyarrow as pa

    from pyspark_eventhubs.arrow_columns import binary_column, int64_column, string_map_column

    strings = ["a", None, "", "h\u00e9"]
    assert binary_column(strings, pa.string()).equals(pa.array(strings, type=pa.string()))
    blobs = [b"\x00\xff", None, b""]
    assert binary_column(blobs, pa.binary()).equals(pa.array(blobs, type=pa.binary()))
    times = [1_700_000_000_000_000, None]
    ts = pa.timestamp("us", tz="UTC")
    assert int64_column(times, ts).equals(pa.array(times, type=pa.int64()).cast(ts))
    map_type = pa.map_(pa.field("key", pa.string(), nullable=False), pa.string())
    rows = [[("k", "v"), ("n", None)], [], [("x", "")]]
    assert string_map_column(rows, map_type).equals(pa.array(rows, type=map_type))

    probe = (
        "import sys; from pyspark_eventhubs.schema import messages_to_record_batch;"
        "from azure.eventhub._pyamqp.message import Message;"
        "m = Message(data=[b'x'], application_properties={b'k': b'v'},"
        " message_annotations={b'x-opt-sequence-number': 1, b'x-opt-offset': b'1',"
        " b'x-opt-enqueued-time': 1700000000000});"
        "assert messages_to_record_batch('0', [m]).num_rows == 1;"
        "print('pandas' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
