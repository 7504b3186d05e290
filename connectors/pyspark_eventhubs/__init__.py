"""Azure Event Hubs for Spark 4 in pure Python: ``spark.readStream.format("eventhubs")``."""
