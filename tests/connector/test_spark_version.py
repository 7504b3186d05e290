"""An older pyspark gets an error naming the Spark version a feature needs (no second pyspark here)."""

from __future__ import annotations

import pytest

from pyspark_eventhubs.spark_version import (
    DATA_SOURCE_SPARK,
    STREAMING_SPARK,
    SparkVersionError,
    parse_version,
    require_spark,
)


@pytest.mark.parametrize("version", ["4.0.1", "4.1.1", "4.1.0.dev0"])
def test_streaming_on_spark_older_than_4_2_names_the_version_needed(version: str) -> None:
    with pytest.raises(SparkVersionError) as info:
        require_spark(STREAMING_SPARK, "readStream", version)
    message = str(info.value)
    assert "Spark >= 4.2" in message and f"pyspark {version}" in message and "readStream" in message


@pytest.mark.parametrize("version", ["4.2.0", "4.3.0.dev1", "4.10.0", "5.0.0rc1"])
def test_streaming_on_spark_4_2_or_newer_passes(version: str) -> None:
    require_spark(STREAMING_SPARK, "readStream", version)


def test_spark_3_is_refused_for_any_use() -> None:
    with pytest.raises(SparkVersionError, match=r"Spark >= 4\.0.*pyspark 3\.5\.1"):
        require_spark(DATA_SOURCE_SPARK, "the Python Data Source API", "3.5.1")
    assert parse_version("4.12.3") == (4, 12)


def test_the_installed_pyspark_is_checked_by_default() -> None:
    import pyspark

    require_spark(STREAMING_SPARK, "readStream")  # the lock's pyspark 4.2.0
    assert parse_version(pyspark.__version__) >= STREAMING_SPARK


def test_the_stream_reader_checks_the_version_before_importing_streaming_classes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pyspark

    from pyspark_eventhubs import DefaultSource
    from pyspark_eventhubs.schema import EVENTHUBS_SCHEMA

    source = DefaultSource({"eventhubs.connectionString": "Endpoint=sb://ns/;SharedAccessKey=k;EntityPath=h"})
    monkeypatch.setattr(pyspark, "__version__", "4.1.1")
    with pytest.raises(SparkVersionError, match=r"readStream .*Spark >= 4\.2"):
        source.streamReader(EVENTHUBS_SCHEMA)
