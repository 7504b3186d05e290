"""A pipeline of a user's own, written from docs/pipelines.md alone: it imports nothing of hubflow.

Each event of one Event Hubs source (the parameter ``events``) becomes one row: the connector's
identity columns, the body as text, and the UTC day the hub enqueued it (the sink's partition
column). The stack proof supervises it (``tests/deploy/stack``) and the DAG tests backfill it
through a real scheduler (``tests/dags``), so what hubflow does for a job is proven on a function
that is not one of its built-ins.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def tagged(events: DataFrame) -> DataFrame:
    """One row per event: its partition, sequence number, enqueued time and body, the body as
    ``text``, and ``ingest_date``. Runs on the driver (it builds the plan)."""
    return events.select(
        "partition",
        "sequenceNumber",
        "enqueuedTime",
        "body",
        F.col("body").cast("string").alias("text"),
        F.to_date("enqueuedTime").alias("ingest_date"),
    )
