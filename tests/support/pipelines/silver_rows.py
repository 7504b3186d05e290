"""A pipeline of a user's own on a Delta table, written from docs/pipelines.md alone: it imports
nothing of hubflow.

Each row of the source ``silver`` (``telemetry_silver``'s table) becomes one row of its identity
columns and device, stamped with when this pipeline wrote it (``_gold_at``), so a test can tell
which rows a backfill replaced. The DAG tests run it downstream of silver (``tests/dags``): its
``__follow`` DAG replaces the hours silver's backfills replaced.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def gold(silver: DataFrame) -> DataFrame:
    """Silver's event identity, enqueued time (the interval column) and device, and ``_gold_at``.
    Runs on the driver (it builds the plan)."""
    return silver.select(
        "partition",
        "sequenceNumber",
        "enqueuedTime",
        "device",
        F.current_timestamp().alias("_gold_at"),
    )
