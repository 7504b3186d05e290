"""Which Spark this connector needs, checked where the need arises, with a message that says so.

The Python Data Source API exists since Spark 4.0 (batch reads and writes, streaming writes);
streaming reads need 4.2, which gave Python sources admission control (``maxEventsPerTrigger``)
and ``Trigger.AvailableNow`` — without them a query would silently read everything in one batch.
On an older pyspark the failure would otherwise be an ImportError deep inside Spark's planner.
"""

from __future__ import annotations

import re

#: Oldest Spark with the Python Data Source API (batch reads and writes, streaming writes).
DATA_SOURCE_SPARK = (4, 0)
#: Oldest Spark whose Python streaming sources get admission control and Trigger.AvailableNow.
STREAMING_SPARK = (4, 2)


class SparkVersionError(RuntimeError):
    """The installed pyspark is older than a feature of the connector needs."""


def parse_version(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a pyspark version string such as ``4.2.0``, ``4.3.0.dev1``, ``4.1.1``."""
    match = re.match(r"\s*(\d+)\.(\d+)", version)
    if match is None:
        raise SparkVersionError(f"cannot read the pyspark version {version!r}")
    return int(match.group(1)), int(match.group(2))


def require_spark(minimum: tuple[int, int], feature: str, version: str | None = None) -> None:
    """Raise :class:`SparkVersionError` naming ``feature`` and the Spark it needs when ``version``
    (default: the installed pyspark's) is older than ``minimum``."""
    if version is None:
        import pyspark

        version = pyspark.__version__
    if parse_version(version) < minimum:
        needed = ".".join(str(part) for part in minimum)
        raise SparkVersionError(
            f'format("eventhubs"): {feature} needs Spark >= {needed}, but this is pyspark {version}. '
            f"Upgrade Spark (and pyspark) to {needed} or newer."
        )
