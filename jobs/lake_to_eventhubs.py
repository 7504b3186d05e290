"""Entry point of the publisher job: ``spark-submit jobs/lake_to_eventhubs.py --config FILE``.

Publishes the rows of a lake table (or the bronze output of eventhubs_to_lake) to an Event Hub
through the connector's sink, at-least-once; see ``hubflow_jobs.lake_to_eventhubs`` and
docs/jobs-aggregate-and-publish.md.
"""

import sys

from hubflow_jobs.lake_to_eventhubs import LakeToEventHubsConfig, start_lake_to_eventhubs
from hubflow_jobs.runner import main

if __name__ == "__main__":
    sys.exit(
        main(
            sys.argv[1:],
            LakeToEventHubsConfig,
            start_lake_to_eventhubs,
            description="lake table -> Event Hubs (replay, forwarding)",
        )
    )
