"""Azure Event Hubs for Spark 4 in pure Python: ``spark.readStream.format("eventhubs")``.

Needs Spark >= 4.2 for streaming reads and >= 4.0 for the rest (``spark_version.py`` says so
when an older pyspark is installed). Installing this package is enough: Spark 4 finds top-level
``pyspark_*`` modules that expose ``DefaultSource`` and registers ``format("eventhubs")`` by
itself. Options, schema and checkpoint offsets are those of azure-event-hubs-spark, without the
JVM jar and without encrypting the connection string. See docs/connector.md.
"""

from __future__ import annotations

from .spark_version import DATA_SOURCE_SPARK, STREAMING_SPARK, SparkVersionError, require_spark

require_spark(DATA_SOURCE_SPARK, "the Python Data Source API")

from pyspark.sql.datasource import (  # noqa: E402 - after the version check, which explains failures
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType  # noqa: E402

from .errors import EventHubsDataLossError, EventHubsOptionError, EventHubsReadError  # noqa: E402
from .options import EventHubsOptions, parse_options  # noqa: E402
from .positions import EventPosition, position_key  # noqa: E402
from .redaction import SPARK_REDACTION_REGEX, protect_secrets, redaction_conf  # noqa: E402
from .registration import register_data_source  # noqa: E402
from .schema import EVENTHUBS_SCHEMA  # noqa: E402

__all__ = [
    "EVENTHUBS_SCHEMA",
    "SPARK_REDACTION_REGEX",
    "DefaultSource",
    "EventHubsDataLossError",
    "EventHubsOptionError",
    "EventHubsOptions",
    "EventHubsReadError",
    "EventPosition",
    "SparkVersionError",
    "parse_options",
    "position_key",
    "protect_secrets",
    "redaction_conf",
    "register_data_source",
]


class DefaultSource(DataSource):
    """The ``eventhubs`` data source: stream and batch reader, stream and batch writer.

    Options are validated when the DataFrame is defined, so a bad option fails at query start.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = parse_options(options)

    @classmethod
    def name(cls) -> str:
        return "eventhubs"

    def schema(self) -> StructType:
        return EVENTHUBS_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from .batch_reader import EventHubsBatchReader

        return EventHubsBatchReader(self.parsed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        require_spark(STREAMING_SPARK, "readStream (admission control and Trigger.AvailableNow)")
        from .stream_reader import EventHubsStreamReader

        return EventHubsStreamReader(self.parsed)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .writer import EventHubsBatchWriter

        if overwrite:
            raise EventHubsOptionError(
                "Event Hubs is append-only: use mode('append') (overwrite is not possible)."
            )
        return EventHubsBatchWriter(self.parsed, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .writer import EventHubsStreamWriter

        return EventHubsStreamWriter(self.parsed, schema)
