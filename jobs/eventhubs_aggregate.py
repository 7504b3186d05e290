"""Entry point of the aggregation job: ``spark-submit jobs/eventhubs_aggregate.py --config FILE``.

Aggregates an Event Hub's JSON events into event-time windows per key (watermark, RocksDB state),
written to a lake table (Delta or parquet); late events counted, bad events quarantined. See
``hubflow_jobs.eventhubs_aggregate`` and docs/jobs-aggregate-and-publish.md.
"""

import sys

from hubflow_jobs.eventhubs_aggregate import EventHubsAggregateConfig, start_eventhubs_aggregate
from hubflow_jobs.runner import main

if __name__ == "__main__":
    sys.exit(
        main(
            sys.argv[1:],
            EventHubsAggregateConfig,
            start_eventhubs_aggregate,
            description="Event Hubs -> windowed aggregates in the lake (Delta or parquet)",
        )
    )
