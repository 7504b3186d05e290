"""Entry point of the publisher job: ``spark-submit jobs/lake_to_eventhubs.py --config FILE``.

Publishes the rows of a lake table (or the bronze output of eventhubs_to_lake) to an Event Hub
through the connector's sink, at-least-once: the built-in pipeline
``hubflow_jobs.builtins.lake_to_eventhubs``; see docs/jobs-aggregate-and-publish.md.
"""

import sys

from hubflow_jobs.pipeline.job import run_builtin

if __name__ == "__main__":
    sys.exit(run_builtin("lake_to_eventhubs", sys.argv[1:]))
