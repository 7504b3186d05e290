"""Entry point of the aggregation job: ``spark-submit jobs/eventhubs_aggregate.py --config FILE``.

Aggregates an Event Hub's JSON events into event-time windows per key (watermark, RocksDB state),
written to a lake table (Delta or parquet); late events counted, bad events quarantined: the
built-in pipeline ``hubflow_jobs.builtins.eventhubs_aggregate``; see docs/jobs-aggregate-and-publish.md
and docs/pipelines.md.
"""

import sys

from hubflow_jobs.pipeline.job import run_builtin

if __name__ == "__main__":
    sys.exit(run_builtin("eventhubs_aggregate", sys.argv[1:]))
