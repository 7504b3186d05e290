"""Secrets are scrubbed from text; the sink's column rules are checked before any task runs."""

from __future__ import annotations

import re

import pytest
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from pyspark_eventhubs.errors import EventHubsOptionError
from pyspark_eventhubs.options import parse_options
from pyspark_eventhubs.redaction import SPARK_REDACTION_REGEX, redact, redaction_conf
from pyspark_eventhubs.writer import sink_columns

CONN = "Endpoint=sb://ns/;SharedAccessKeyName=Root;SharedAccessKey=S3cr3t=;EntityPath=hub1"


def test_redact_removes_keys_signatures_and_the_whole_string() -> None:
    opts = parse_options({"eventhubs.connectionString": CONN})
    text = f"failed with {CONN} and SharedAccessSignature sr=x&sig=AbC%2F&se=1&skn=Root"
    cleaned = redact(text, opts)
    assert "S3cr3t" not in cleaned and "AbC%2F" not in cleaned
    assert "SharedAccessKey=S3cr3t" not in redact("SharedAccessKey=S3cr3t;x", None)


def test_spark_redaction_regex_matches_every_secret_form() -> None:
    pattern = re.compile(SPARK_REDACTION_REGEX.replace("(?i)", ""), re.IGNORECASE)
    assert pattern.search("eventhubs.connectionString")
    assert pattern.search("Endpoint=sb://ns/;SharedAccessSignature=SharedAccessSignature sr=")
    assert pattern.search("eventhubs.clientSecret")
    assert "spark.redaction.regex" in redaction_conf()


def _schema(*fields: StructField) -> StructType:
    return StructType(list(fields))


def test_sink_columns() -> None:
    cols = sink_columns(
        _schema(
            StructField("body", BinaryType()),
            StructField("partition", IntegerType()),
            StructField("properties", MapType(StringType(), StringType())),
            StructField("other", StringType()),
        )
    )
    assert (cols.body, cols.partition_id, cols.partition_key, cols.properties) == (
        "body",
        "partition",
        None,
        "properties",
    )


def test_key_and_id_columns_together_are_accepted_and_the_first_id_column_wins() -> None:
    cols = sink_columns(
        _schema(
            StructField("body", BinaryType()),
            StructField("partition", StringType()),
            StructField("partitionKey", StringType()),
            StructField("partitionId", StringType()),
        )
    )
    assert (cols.partition_key, cols.partition_id) == ("partitionKey", "partition")


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ([StructField("value", StringType())], "'body'"),
        ([StructField("body", IntegerType())], "'body'"),
        (
            [StructField("body", StringType()), StructField("properties", StringType())],
            "'properties'",
        ),
    ],
)
def test_bad_sink_schema_is_rejected(fields: list[StructField], named: str) -> None:
    with pytest.raises(EventHubsOptionError, match=named):
        sink_columns(_schema(*fields))
