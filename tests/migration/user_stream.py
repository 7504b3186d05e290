"""A user's PySpark stream written for Microsoft's Scala Event Hubs connector, as its PySpark guide
(Azure/azure-event-hubs-spark docs/PySpark/structured-streaming-pyspark.md) shows it: the connection
string encrypted with ``EventHubsUtils.encrypt``, ``EventHubsConf`` option names, the starting
position as EventPosition JSON, ``maxEventsPerTrigger``; a parquet sink with a checkpoint.

tests/migration/test_scala_connector_migration.py runs it with spark-submit on Spark 3.5 with the
connector's jar, stops it part-way, then runs it migrated (the encrypt call below dropped, the
jar "deleted": Spark 4.2 with hubflow's connector) on the same checkpoint.

Settings come from the environment, as a job's would (the connection string is a secret: never on
the command line): ``EVENTHUBS_CONNECTION_STRING``, ``OUTPUT_PATH``, ``CHECKPOINT_PATH``,
``STOP_FILE`` (the query stops at the end of its batch once that file exists) and
``EVENTHUBS_EXTRA_OPTIONS`` (JSON, options of the environment such as a CA to trust).
"""

import json
import os

from pyspark.sql import SparkSession
from pyspark.sql.functions import col

spark = SparkSession.builder.appName("user-stream").getOrCreate()
sc = spark.sparkContext

connectionString = os.environ["EVENTHUBS_CONNECTION_STRING"]
ehConf = {}
# The line the migration changes (docs/connector.md, "Migrating from azure-event-hubs-spark"):
# fmt: off
ehConf["eventhubs.connectionString"] = sc._jvm.org.apache.spark.eventhubs.EventHubsUtils.encrypt(connectionString)  # noqa: E501
# fmt: on
ehConf["eventhubs.consumerGroup"] = "cg1"
startingEventPosition = {
    "offset": "-1",  # start of stream
    "seqNo": -1,  # not in use
    "enqueuedTime": None,  # not in use
    "isInclusive": True,
}
ehConf["eventhubs.startingPosition"] = json.dumps(startingEventPosition)
ehConf["maxEventsPerTrigger"] = 10
# What differs by environment, not by connector: the test's emulator CA for hubflow's connector on
# Spark 4.2 (the Python SDK trusts certifi's bundle, not the environment); nothing against Azure.
ehConf.update(json.loads(os.environ.get("EVENTHUBS_EXTRA_OPTIONS", "{}")))

df = spark.readStream.format("eventhubs").options(**ehConf).load()
events = df.select(
    col("properties")["id"].alias("id"),
    col("body").cast("string").alias("body"),
    "partition",
    "sequenceNumber",
)
query = (
    events.writeStream.format("parquet")
    .option("path", os.environ["OUTPUT_PATH"])
    .option("checkpointLocation", os.environ["CHECKPOINT_PATH"])
    .trigger(processingTime="2 seconds")
    .start()
)
print(f"USER_STREAM_STARTED {spark.version}", flush=True)
while not query.awaitTermination(0.5) and not os.path.exists(os.environ["STOP_FILE"]):
    pass  # a failed query raises here
query.stop()
print("USER_STREAM_STOPPED", flush=True)
spark.stop()
