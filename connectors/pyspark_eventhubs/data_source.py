"""``DefaultSource``: the ``eventhubs`` data source Spark registers, and the only class needing pyspark
to import the package by name (``pyspark_eventhubs.DefaultSource`` loads this module on first use).

The version check comes first so that an old pyspark fails with a message that says what is needed
rather than an ImportError from ``pyspark.sql.datasource``.
"""

from __future__ import annotations

from .spark_version import DATA_SOURCE_SPARK, STREAMING_SPARK, require_spark

require_spark(DATA_SOURCE_SPARK, "the Python Data Source API")

from pyspark.sql.datasource import (  # noqa: E402 - after the version check, which explains failures
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType  # noqa: E402

from .errors import EventHubsOptionError  # noqa: E402
from .options import parse_options  # noqa: E402
from .schema import EVENTHUBS_SCHEMA  # noqa: E402


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
