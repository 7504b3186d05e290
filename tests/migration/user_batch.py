"""A user's batch read of a time window written for Microsoft's Scala Event Hubs connector (its PySpark
guide's options: encrypted connection string, ``eventhubs.startingPosition`` and
``eventhubs.endingPosition`` as EventPosition JSON with ``enqueuedTime``). Writes the rows and the
schema as JSON to ``RESULT_PATH``, so the test compares what the two connectors return.

Settings from the environment: ``EVENTHUBS_CONNECTION_STRING``, ``WINDOW_START`` and ``WINDOW_END``
(ISO-8601 instants, ``Z``), ``RESULT_PATH``, ``EVENTHUBS_EXTRA_OPTIONS`` (as in user_stream.py).
"""

import json
import os

from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("user-batch").config("spark.sql.session.timeZone", "UTC").getOrCreate()
sc = spark.sparkContext

connectionString = os.environ["EVENTHUBS_CONNECTION_STRING"]
ehConf = {}
# The line the migration changes (docs/connector.md, "Migrating from azure-event-hubs-spark"):
# fmt: off
ehConf["eventhubs.connectionString"] = sc._jvm.org.apache.spark.eventhubs.EventHubsUtils.encrypt(connectionString)  # noqa: E501
# fmt: on
ehConf["eventhubs.consumerGroup"] = "cg1"
start = {"offset": None, "seqNo": -1, "enqueuedTime": os.environ["WINDOW_START"], "isInclusive": True}
end = {"offset": None, "seqNo": -1, "enqueuedTime": os.environ["WINDOW_END"], "isInclusive": True}
ehConf["eventhubs.startingPosition"] = json.dumps(start)
ehConf["eventhubs.endingPosition"] = json.dumps(end)
ehConf.update(json.loads(os.environ.get("EVENTHUBS_EXTRA_OPTIONS", "{}")))

df = spark.read.format("eventhubs").options(**ehConf).load()
rows = [
    {
        **row.asDict(),
        "body": bytes(row["body"]).decode(),
        "enqueuedTime": row["enqueuedTime"].isoformat(),
    }
    for row in df.collect()
]
with open(os.environ["RESULT_PATH"], "w") as out:
    json.dump({"spark": spark.version, "schema": json.loads(df.schema.json()), "rows": rows}, out)
print("USER_BATCH_DONE", flush=True)
spark.stop()
