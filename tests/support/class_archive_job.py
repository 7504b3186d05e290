"""The run whose loaded classes ``class_archive.py`` archives: what a test driver typically does.

Runs under spark-submit (local[2]) with ``-XX:ArchiveClassesAtExit``: a Delta session with the jobs'
defaults, a Delta write, read and merge, a Python data source read, and a streaming availableNow query
from JSON files to Delta. Its results are not checked; only the classes it loads matter.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader

from hubflow_jobs.runtime.session import DEFAULT_CONF


class _Numbers(DataSource):
    @classmethod
    def name(cls) -> str:
        return "hubflow_class_archive_numbers"

    def schema(self) -> str:
        return "id INT"

    def reader(self, schema):
        return _NumbersReader()


class _NumbersReader(DataSourceReader):
    def read(self, partition):
        yield from ((i,) for i in range(10))


def main(work: Path) -> None:
    builder = SparkSession.builder.appName("hubflow-class-archive")
    for key, value in {
        **DEFAULT_CONF,
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
    }.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    table = str(work / "table")
    spark.range(100).selectExpr("id", "id % 3 AS k").write.format("delta").partitionBy("k").save(table)
    spark.read.format("delta").load(table).groupBy("k").count().collect()
    spark.sql(
        f"MERGE INTO delta.`{table}` t USING (SELECT 1L AS id, 1L AS k) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    spark.dataSource.register(_Numbers)
    spark.read.format("hubflow_class_archive_numbers").load().collect()
    landing = work / "landing"
    landing.mkdir()
    (landing / "a.json").write_text("\n".join(json.dumps({"id": i, "body": f"e{i}"}) for i in range(20)))
    query = (
        spark.readStream.schema("id BIGINT, body STRING")
        .json(str(landing))
        .writeStream.format("delta")
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start(str(work / "stream"))
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
