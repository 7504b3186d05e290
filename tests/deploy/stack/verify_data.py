"""What the stack's jobs wrote, read inside a container of the stack; prints one JSON report.

Run by the stack proof as ``docker exec -i <container> python - < verify_data.py``. The lake is
read with Spark (local mode), which honours the file sinks' ``_spark_metadata`` logs and Delta's
``_delta_log`` (a table with one is read as Delta): only committed files count. The landing job's
checkpoint is read as Spark wrote it (``sources/0/<batch>`` lists a batch's files,
``commits/<batch>`` exists once the batch is committed), independently of hubflow's own checkpoint
code, so the report can judge the archive.
"""

import json
import os
import sys
from pathlib import Path

DATA = Path("/opt/hubflow/data")
TELEMETRY = DATA / "lake" / "telemetry_bronze"
ORDERS = DATA / "lake" / "orders"
QUARANTINE = DATA / "quarantine" / "orders"
CHECKPOINT = DATA / "checkpoints" / "landing_orders"
LANDING = DATA / "landing" / "orders"
ARCHIVE = DATA / "archive"


def checkpoint_files() -> dict[str, list[str]]:
    """Files of committed and of uncommitted batches of the landing job's file source."""
    committed, uncommitted = [], []
    commits = CHECKPOINT / "commits"
    source_log = CHECKPOINT / "sources" / "0"
    if not source_log.is_dir():
        return {"committed": [], "uncommitted": []}
    for entry in sorted(source_log.iterdir()):
        name = entry.name.removesuffix(".compact")
        if not name.isdigit():
            continue
        lines = entry.read_text(encoding="utf-8").splitlines()[1:]  # the first line is the version
        for line in lines:
            record = json.loads(line)
            path = record["path"].removeprefix("file://")
            batch = int(record.get("batchId", name))
            (committed if (commits / str(batch)).exists() else uncommitted).append(path)
    return {"committed": sorted(set(committed)), "uncommitted": sorted(set(uncommitted))}


def read_table(spark, path: str):
    """A lake table as Spark reads it: Delta when it has a ``_delta_log``, else parquet."""
    fmt = "delta" if os.path.isdir(os.path.join(path, "_delta_log")) else "parquet"
    return spark.read.format(fmt).load(path)


def files_under(root: Path) -> list[str]:
    return (
        sorted(str(p) for p in root.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))
        if root.is_dir()
        else []
    )


def main() -> int:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("stack-proof-verify")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    report: dict = {}
    if TELEMETRY.is_dir():
        events = read_table(spark, str(TELEMETRY)).select(
            F.get_json_object(F.col("body").cast("string"), "$.id").cast("long").alias("id")
        )
        stats = events.agg(
            F.count("*").alias("rows"),
            F.countDistinct("id").alias("distinct"),
            F.min("id").alias("min"),
            F.max("id").alias("max"),
        ).first()
        report["telemetry"] = stats.asDict()
    if ORDERS.is_dir():
        report["orders_ids"] = sorted(
            r.order_id for r in read_table(spark, str(ORDERS)).select("order_id").collect()
        )
    if QUARANTINE.is_dir():
        report["quarantine_raw"] = sorted(r.raw_record for r in read_table(spark, str(QUARANTINE)).collect())
    backfill = {}
    for table, key in ((f"{ORDERS}_backfill", "ids"), (f"{QUARANTINE}_backfill", "raw")):
        if os.path.isdir(table):
            for row in read_table(spark, table).collect():
                entry = backfill.setdefault(row.window_start, {"ids": [], "raw": []})
                entry[key].append(row.order_id if key == "ids" else row.raw_record)
    report["backfill"] = {
        window: {k: sorted(v) for k, v in entry.items()} for window, entry in backfill.items()
    }
    report["checkpoint"] = checkpoint_files()
    report["archive_files"] = files_under(ARCHIVE)
    report["landing_files"] = files_under(LANDING)
    spark.stop()
    print("REPORT " + json.dumps(report, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
