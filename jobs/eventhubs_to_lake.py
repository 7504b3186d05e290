"""spark-submit entry point of the Event Hubs job: ``spark-submit jobs/eventhubs_to_lake.py --config FILE``.

Reads an Event Hub into the bronze table in the lake (Delta or parquet), raw body kept; see
``hubflow_jobs.eventhubs_to_lake`` and docs/jobs.md.
"""

import sys

from hubflow_jobs.eventhubs_to_lake import EventHubsToLakeConfig, start_eventhubs_to_lake
from hubflow_jobs.runner import main

if __name__ == "__main__":
    sys.exit(
        main(
            sys.argv[1:],
            EventHubsToLakeConfig,
            start_eventhubs_to_lake,
            description="Event Hubs -> lake (bronze table, Delta or parquet)",
        )
    )
