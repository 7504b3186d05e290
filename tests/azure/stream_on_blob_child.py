"""A file-to-Delta streaming driver whose every location is on Azure Blob, for test_spark_on_blob.py.

    python -m tests.azure.stream_on_blob_child stream|finish LANDING CHECKPOINT ARCHIVE TABLE STATUS

Spark reaches the storage through hadoop-azure's ABFS driver with the settings
``hubflow.storage.azure`` derives from the access in ``HUBFLOW_AZURE_STORAGE`` (the way a
supervisor hands it to a driver). The file source reads LANDING one file per batch with
``cleanSource=archive`` into ARCHIVE; the sink is the Delta table TABLE; the job's status goes to
the status folder STATUS (``hubflow.status`` on Blob). ``stream`` runs until killed,
printing ``STARTED`` once its query runs and ``COMMITTED <batch id>`` after each batch with rows;
``finish`` runs ``availableNow`` and prints ``IDS <json list>`` of the table's ``id`` column.
"""

from __future__ import annotations

import json
import sys
import time

from pyspark.sql import SparkSession

from hubflow.status import JobState, JobStatus, StatusFolder
from hubflow.storage.azure import SPARK_REDACTION_REGEX, accesses_from_env
from hubflow_jobs.runtime.session import DELTA_CONF


def session() -> SparkSession:
    builder = (
        SparkSession.builder.master("local[1]")
        .appName("stream-on-blob")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        # Delta rebuilds the table's state from its log in this many tasks, each reading from Blob
        # (default 50: 40-115 s per batch on 2 cores); one is plenty for a handful of commits.
        .config("spark.databricks.delta.snapshotPartitions", "1")
        .config("spark.redaction.regex", SPARK_REDACTION_REGEX)
    )
    for key, value in DELTA_CONF.items():
        builder = builder.config(key, value)
    for access in accesses_from_env():
        for key, value in access.hadoop_conf().items():
            builder = builder.config(f"spark.hadoop.{key}", value)
    return builder.getOrCreate()


def main(mode: str, landing: str, checkpoint: str, archive: str, table: str, status_url: str) -> int:
    spark = session()
    status = JobStatus(StatusFolder(status_url), "orders")
    status.update(state=JobState.RUNNING)

    reader = (
        spark.readStream.format("json")
        .schema("id long")
        .option("maxFilesPerTrigger", 1)
        .option("cleanSource", "archive")
        .option("sourceArchiveDir", archive)
        .load(landing)
    )
    # The Delta sink is idempotent per batch id: a batch replayed after a kill is not written twice.
    writer = reader.writeStream.format("delta").option("checkpointLocation", checkpoint)
    if mode == "finish":
        writer.trigger(availableNow=True).start(table).awaitTermination()
        status.update(state=JobState.STOPPED)
        ids = [row.id for row in spark.read.format("delta").load(table).select("id").collect()]
        print(f"IDS {json.dumps(sorted(ids))}", flush=True)
        return 0
    query = writer.trigger(processingTime="500 milliseconds").start(table)
    print("STARTED", flush=True)  # the JVM is up: the test's batch deadline starts here
    reported = None
    while query.isActive:
        progress = query.lastProgress
        if progress and progress["batchId"] != reported and progress["numInputRows"]:
            reported = progress["batchId"]
            status.update(last_progress={"batch_id": reported, "num_input_rows": progress["numInputRows"]})
            print(f"COMMITTED {reported}", flush=True)
        time.sleep(0.2)
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:7]))
