"""Azure Event Hubs for Spark 4 in pure Python: ``spark.readStream.format("eventhubs")``.

Needs Spark >= 4.2 for streaming reads and >= 4.0 for the rest (``spark_version.py`` says so
when an older pyspark is installed). Installing this package is enough: Spark 4 finds top-level
``pyspark_*`` modules that expose ``DefaultSource`` and registers ``format("eventhubs")`` by
itself. Options, schema and checkpoint offsets are those of azure-event-hubs-spark, without the
JVM jar and without encrypting the connection string. See docs/connector.md.

The Event Hubs vocabulary (:class:`EventPosition`, :class:`EventHubsConnectionString`,
:data:`DEFAULT_CONSUMER_GROUP`, the options) imports without pyspark, so Airflow-side code and
job configs use it too; ``DefaultSource`` and ``EVENTHUBS_SCHEMA`` load pyspark (after the version
check) on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .connection_string import ConnectionStringError, EventHubsConnectionString
from .errors import EventHubsDataLossError, EventHubsOptionError, EventHubsReadError
from .options import DEFAULT_CONSUMER_GROUP, EventHubsOptions, parse_options
from .positions import EventPosition, position_key
from .redaction import SPARK_REDACTION_REGEX, protect_secrets, redaction_conf
from .registration import register_data_source
from .spark_version import DATA_SOURCE_SPARK, SparkVersionError, require_spark

if TYPE_CHECKING:
    from .data_source import DefaultSource
    from .schema import EVENTHUBS_SCHEMA

__all__ = [
    "DEFAULT_CONSUMER_GROUP",
    "EVENTHUBS_SCHEMA",
    "SPARK_REDACTION_REGEX",
    "ConnectionStringError",
    "DefaultSource",
    "EventHubsConnectionString",
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

# The names that need pyspark, and the module that defines each.
_PYSPARK_NAMES = {"DefaultSource": ".data_source", "EVENTHUBS_SCHEMA": ".schema"}


def __getattr__(name: str) -> Any:
    """``DefaultSource`` and ``EVENTHUBS_SCHEMA`` on first use: pyspark is imported only then."""
    if name not in _PYSPARK_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    require_spark(DATA_SOURCE_SPARK, "the Python Data Source API")
    value = getattr(import_module(_PYSPARK_NAMES[name], __name__), name)
    globals()[name] = value
    return value
