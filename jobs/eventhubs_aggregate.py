"""Entry point of the aggregation job: ``spark-submit jobs/eventhubs_aggregate.py --config FILE``.

Aggregates an Event Hub's JSON events into event-time windows per key (watermark, RocksDB state),
written to a lake table (Delta or parquet); late events counted, bad events quarantined. See
``hubflow_jobs.eventhubs_aggregate`` and docs/jobs-aggregate-and-publish.md.
"""

import sys

from hubflow_jobs.runner import run_application

if __name__ == "__main__":
    sys.exit(run_application("eventhubs_aggregate", sys.argv[1:]))
