"""``as_eventhubs_rows``: Spark Kafka source rows as the ``eventhubs`` kind's columns, on frames built
in memory with the Kafka source's schema (no broker). The edges its compiled-expression mapping of
headers could get wrong: repeated keys (the last value, wherever the repeats are), null and empty
header arrays, null header values, bytes that are not UTF-8, and Spark's map-key settings."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.integration

#: Spark's Kafka source schema with ``includeHeaders``.
KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key: string, value: binary>>"
)


def record(offset: int, headers: list[tuple[str, bytes | None]] | None, key: bytes | None = None) -> tuple:
    return (key, b"body", "hub1", offset % 4, offset, None, 0, headers)


def properties_by_offset(spark: Any, records: list[tuple]) -> dict[int, list[tuple[str, str | None]]]:
    """Each record's ``properties`` as its (key, value) entries in the map's order (``map_entries``:
    a collected map is a dict in the JVM's hash order)."""
    from pyspark.sql import functions as F

    from hubflow_jobs.eventhubs_kafka import as_eventhubs_rows

    mapped = as_eventhubs_rows(spark.createDataFrame(records, KAFKA_SCHEMA))
    rows = mapped.select("sequenceNumber", F.map_entries("properties").alias("entries")).collect()
    return {row["sequenceNumber"]: [(e["key"], e["value"]) for e in row["entries"]] for row in rows}


def last_of_each(headers: list[tuple[str, bytes | None]] | None) -> list[tuple[str, str | None]]:
    """What the mapping promises, written plainly: each key once with its last value, the keys in the
    order of their last occurrence (valid UTF-8 values only)."""
    entries: dict[str, str | None] = {}
    for key, value in headers or []:
        entries.pop(key, None)
        entries[key] = None if value is None else value.decode()
    return list(entries.items())


@pytest.fixture
def map_key_policy(spark: Any) -> Iterator[Any]:
    """``spark`` with ``spark.sql.mapKeyDedupPolicy`` restored after the test."""
    before = spark.conf.get("spark.sql.mapKeyDedupPolicy")
    yield spark
    spark.conf.set("spark.sql.mapKeyDedupPolicy", before)


def test_repeated_header_keys_keep_their_last_value_wherever_the_repeats_are(spark: Any) -> None:
    cases = {
        1: [("k", b"1"), ("k", b"2")],
        2: [("k", b"1"), ("x", b"y"), ("k", b"2"), ("k", b"3")],
        3: [("a", b"1"), ("b", b"2"), ("a", b"3"), ("c", b"4"), ("b", b"5")],
        4: [("a", b"1"), ("a", None)],  # a null last value is the value
        5: [("a", None), ("a", b"1")],
        6: [("k", b"same"), ("k", b"same")],
        7: [("a", b"1"), ("b", b"2"), ("c", b"3")],  # no repeat: the headers' order
    }
    got = properties_by_offset(spark, [record(n, headers) for n, headers in cases.items()])
    assert got == {n: last_of_each(headers) for n, headers in cases.items()}
    assert got[2] == [("x", "y"), ("k", "3")]
    assert got[4] == [("a", None)]


def test_random_headers_map_as_written_plainly(spark: Any) -> None:
    """Many header arrays (0-8 headers over 4 keys, some values null): the same entries as
    :func:`last_of_each`, repeats or not, in one frame, as rows of both kinds meet in a batch."""
    rng = random.Random(49)
    cases = {
        n: [
            (rng.choice("abcd"), rng.choice([b"", b"1", b"two", "caf\u00e9".encode(), None]))
            for _ in range(rng.randint(0, 8))
        ]
        for n in range(400)
    }
    assert any(len({k for k, _ in h}) < len(h) for h in cases.values())  # repeats among them
    assert any(len({k for k, _ in h}) == len(h) > 1 for h in cases.values())  # and none
    got = properties_by_offset(spark, [record(n, headers) for n, headers in cases.items()])
    assert got == {n: last_of_each(headers) for n, headers in cases.items()}


def test_null_and_empty_headers_give_an_empty_map_and_a_null_key_a_null_partition_key(spark: Any) -> None:
    from hubflow_jobs.eventhubs_kafka import as_eventhubs_rows

    frame = spark.createDataFrame([record(0, None), record(1, []), record(2, [], key=b"pk")], KAFKA_SCHEMA)
    rows = {row["sequenceNumber"]: row for row in as_eventhubs_rows(frame).collect()}
    assert [rows[n]["properties"] for n in range(3)] == [{}, {}, {}]
    assert [rows[n]["partitionKey"] for n in range(3)] == [None, None, "pk"]
    assert rows[0]["systemProperties"] == {} and rows[0]["offset"] is None and rows[0]["publisher"] is None


def test_values_that_are_not_utf8_are_what_sparks_cast_makes_of_them(spark: Any) -> None:
    """A header value's text (and a record key's) is ``cast(<bytes> as string)``: Spark keeps the
    bytes as they are, whether or not they are UTF-8, also where a repeated key is resolved."""
    from pyspark.sql import functions as F

    from hubflow_jobs.eventhubs_kafka import as_eventhubs_rows

    odd = [b"\xff\xfe", b"caf\xc3", b"\xc3\xa9", b"a\x00b", b"\x80"]
    records = [record(n, [("h", raw), ("r", b"x"), ("r", raw)], key=raw) for n, raw in enumerate(odd)]
    source = spark.createDataFrame(records, KAFKA_SCHEMA)
    mapped = as_eventhubs_rows(source).join(
        source.select(F.col("offset").alias("sequenceNumber"), F.col("key").alias("raw")), "sequenceNumber"
    )
    checked = mapped.select(
        "sequenceNumber",
        (F.col("properties")["h"] == F.col("raw").cast("string")).alias("as_cast"),
        (F.col("properties")["h"].cast("binary") == F.col("raw")).alias("same_bytes"),
        (F.col("properties")["r"].cast("binary") == F.col("raw")).alias("repeat_same_bytes"),
        (F.col("partitionKey").cast("binary") == F.col("raw")).alias("key_same_bytes"),
    ).collect()
    assert len(checked) == len(odd)
    assert all(
        row["as_cast"] and row["same_bytes"] and row["repeat_same_bytes"] and row["key_same_bytes"]
        for row in checked
    )


@pytest.mark.parametrize("policy", ["EXCEPTION", "LAST_WIN"])
def test_the_mapping_is_the_same_under_either_map_key_policy_and_leaves_it_alone(
    map_key_policy: Any, policy: str
) -> None:
    """The mapping needs no ``spark.sql.mapKeyDedupPolicy`` (which would be the whole query's) and
    changes none: the user's own map functions keep refusing a repeated key under the default."""
    spark = map_key_policy
    spark.conf.set("spark.sql.mapKeyDedupPolicy", policy)
    got = properties_by_offset(spark, [record(0, [("k", b"1"), ("x", b"y"), ("k", b"2")])])
    assert got == {0: [("x", "y"), ("k", "2")]}
    assert spark.conf.get("spark.sql.mapKeyDedupPolicy") == policy
