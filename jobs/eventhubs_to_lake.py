"""spark-submit entry point of the Event Hubs job: ``spark-submit jobs/eventhubs_to_lake.py --config FILE``.

Reads an Event Hub into the bronze table in the lake (Delta or parquet), raw body kept; see
``hubflow_jobs.eventhubs_to_lake`` and docs/jobs.md.
"""

import sys

from hubflow_jobs.runner import run_application

if __name__ == "__main__":
    sys.exit(run_application("eventhubs_to_lake", sys.argv[1:]))
