"""Azure Event Hubs for Spark 4 in pure Python: ``spark.readStream.format("eventhubs")``.

Installing this package is enough: Spark 4 finds top-level ``pyspark_*`` modules that expose
``DefaultSource`` and registers ``format("eventhubs")`` by itself. Options, schema and checkpoint
offsets are those of azure-event-hubs-spark, without the JVM jar and without encrypting the
connection string. See docs/connector.md.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .errors import EventHubsDataLossError, EventHubsOptionError, EventHubsReadError
from .options import EventHubsOptions, parse_options
from .positions import EventPosition, position_key
from .redaction import SPARK_REDACTION_REGEX, protect_secrets, redaction_conf
from .schema import EVENTHUBS_SCHEMA

__all__ = [
    "EVENTHUBS_SCHEMA",
    "SPARK_REDACTION_REGEX",
    "DefaultSource",
    "EventHubsDataLossError",
    "EventHubsOptionError",
    "EventHubsOptions",
    "EventHubsReadError",
    "EventPosition",
    "parse_options",
    "position_key",
    "protect_secrets",
    "redaction_conf",
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
