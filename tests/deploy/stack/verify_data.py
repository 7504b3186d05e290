"""What the stack's jobs wrote, read inside a container of the stack; prints one JSON report.

Run by the stack proof as ``docker exec -i <container> python - < verify_data.py``. Where the jobs
write and in which format is asked of the project's own code: the proof's job configs
(tests/deploy/stack/*.yaml, mounted at /opt/hubflow/stack-test) loaded with the jobs' own config
models, and each sink's ``format`` when the sink declares one (Delta or parquet), else parquet (what
Spark's file sink writes, :mod:`hubflow_jobs.lake.file_sink`). The lake is read with Spark (local mode),
which honours the file sink's ``_spark_metadata`` log and Delta's ``_delta_log``: only committed
rows count. Backfilled intervals are read where the project's backfill writes them: the side tables
of :func:`hubflow_jobs.backfill.backfill_path` for parquet, the job's own tables (rows of the
interval's folders, by ``_source_file``) for Delta, which a backfill replaces in place. The landing
job's checkpoint is read as Spark wrote it (``sources/0/<batch>`` lists a batch's files,
``commits/<batch>`` exists once the batch is committed), independently of hubflow's own checkpoint
code, so the report can judge the archive.
"""

import json
import os
import sys
from datetime import datetime
from pathlib import Path

from hubflow_jobs.backfill import WINDOW_COLUMN, backfill_path
from hubflow_jobs.builtins.eventhubs_to_lake import EventHubsToLakeConfig
from hubflow_jobs.builtins.files_to_lake import SINK, SOURCE, FilesToLakeConfig
from hubflow_jobs.config import load_config

CONFIGS = Path("/opt/hubflow/stack-test")
# The telemetry config names the variable its connection string comes in; a driver gets it from the
# eventhubs_default connection, and so does this report (it never connects: it reads the lake).
EVENTHUBS_CONNECTION = json.loads(os.environ["AIRFLOW_CONN_EVENTHUBS_DEFAULT"])
os.environ.setdefault("HUBFLOW_EVENTHUBS_CONNECTION_STRING", EVENTHUBS_CONNECTION["password"])
TELEMETRY = load_config(CONFIGS / "telemetry_bronze.yaml", EventHubsToLakeConfig)
ORDERS = load_config(CONFIGS / "landing_orders.yaml", FilesToLakeConfig)
CHECKPOINT = Path(ORDERS.checkpoint_location)
ORDERS_SOURCE, ORDERS_SINK = ORDERS.sources[SOURCE], ORDERS.sinks[SINK]
LANDING = Path(ORDERS_SOURCE.path)
ARCHIVE = Path(ORDERS_SOURCE.archive_dir)


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


def read_table(spark, path: str, file_format: str):
    """A lake table as Spark reads it in ``file_format`` (only committed rows); None when absent."""
    return spark.read.format(file_format).load(path) if os.path.isdir(path) else None


def interval_label(source_file: str) -> str:
    """The backfill window of a landing file: its interval folder under the landing path, as the
    backfill labels windows (``%Y-%m-%dT%H:%M:%SZ``)."""
    folder = os.path.dirname(source_file.removeprefix("file:").lstrip("/"))
    relative = os.path.relpath("/" + folder, str(LANDING))
    return datetime.strptime(relative, ORDERS_SOURCE.interval_folder).strftime("%Y-%m-%dT%H:%M:%SZ")


def files_under(root: Path) -> list[str]:
    return (
        sorted(str(p) for p in root.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))
        if root.is_dir()
        else []
    )


def replacements(spark, path: str) -> int:
    """How many commits of the Delta table at ``path`` replaced rows (``replaceWhere``: an overwrite
    with a predicate), from its history."""
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, path).history().collect()
    return sum(
        1
        for commit in history
        if (commit.operationParameters or {}).get("mode") == "Overwrite"
        and (commit.operationParameters or {}).get("predicate")
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
    telemetry_format, orders_format = TELEMETRY.sinks["bronze"].kind, ORDERS_SINK.kind
    report["formats"] = {"telemetry": telemetry_format, "orders": orders_format}
    telemetry = read_table(spark, TELEMETRY.sinks["bronze"].output_path, telemetry_format)
    if telemetry is not None:
        events = telemetry.select(
            F.get_json_object(F.col("body").cast("string"), "$.id").cast("long").alias("id")
        )
        stats = events.agg(
            F.count("*").alias("rows"),
            F.countDistinct("id").alias("distinct"),
            F.min("id").alias("min"),
            F.max("id").alias("max"),
        ).first()
        report["telemetry"] = stats.asDict()
    orders = read_table(spark, ORDERS_SINK.output_path, orders_format)
    quarantine = read_table(spark, ORDERS_SINK.quarantine_path, orders_format)
    if orders is not None:
        report["orders_ids"] = sorted(r.order_id for r in orders.select("order_id").collect())
    if quarantine is not None:
        report["quarantine_raw"] = sorted(r.raw_record for r in quarantine.select("raw_record").collect())
    backfill: dict = {}
    if orders_format == "parquet":
        sides = [
            (read_table(spark, backfill_path(ORDERS_SINK.output_path), "parquet"), "ids"),
            (read_table(spark, backfill_path(ORDERS_SINK.quarantine_path), "parquet"), "raw"),
        ]
        for table, key in sides:
            for row in table.collect() if table is not None else []:
                entry = backfill.setdefault(row[WINDOW_COLUMN], {"ids": [], "raw": []})
                entry[key].append(row.order_id if key == "ids" else row.raw_record)
    else:  # Delta: a backfill replaces the interval's rows in the job's own tables
        # Lake rows name their file in ``_source_file``, quarantine rows in ``source_file``.
        for table, key, column in ((orders, "ids", "_source_file"), (quarantine, "raw", "source_file")):
            for row in table.collect() if table is not None else []:
                entry = backfill.setdefault(interval_label(row[column]), {"ids": [], "raw": []})
                entry[key].append(row.order_id if key == "ids" else row.raw_record)
    report["backfill"] = {
        window: {k: sorted(v) for k, v in entry.items()} for window, entry in backfill.items()
    }
    if orders_format == "delta":  # the backfill's replaceWhere commits (the stream only appends)
        tables = {"orders": ORDERS_SINK.output_path, "quarantine": ORDERS_SINK.quarantine_path}
        report["replacements"] = {name: replacements(spark, path) for name, path in tables.items()}
    report["checkpoint"] = checkpoint_files()
    report["archive_files"] = files_under(ARCHIVE)
    report["landing_files"] = files_under(LANDING)
    spark.stop()
    print("REPORT " + json.dumps(report, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
