"""spark-submit entry point of the Event Hubs job: ``spark-submit jobs/eventhubs_to_lake.py --config FILE``.

Reads an Event Hub into the bronze table in the lake (Delta or parquet), raw body kept: the built-in
pipeline ``hubflow_jobs.builtins.eventhubs_to_lake``; see docs/jobs.md and docs/pipelines.md.
"""

import sys

from hubflow_jobs.pipeline.job import run_builtin

if __name__ == "__main__":
    sys.exit(run_builtin("eventhubs_to_lake", sys.argv[1:]))
