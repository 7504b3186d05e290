"""Entry point of the publisher job: ``spark-submit jobs/lake_to_eventhubs.py --config FILE``.

Publishes the rows of a lake table (or the bronze output of eventhubs_to_lake) to an Event Hub
through the connector's sink, at-least-once; see ``hubflow_jobs.lake_to_eventhubs`` and
docs/jobs-aggregate-and-publish.md.
"""

import sys

from hubflow_jobs.runner import run_application

if __name__ == "__main__":
    sys.exit(run_application("lake_to_eventhubs", sys.argv[1:]))
