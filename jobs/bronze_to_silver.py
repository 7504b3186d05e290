"""spark-submit entry point of the silver job: ``spark-submit jobs/bronze_to_silver.py --config FILE``.

Reads the bronze Delta table of eventhubs_to_lake incrementally and writes typed silver rows,
quarantining bodies that do not parse: the built-in pipeline ``hubflow_jobs.builtins.bronze_to_silver``;
see docs/delta.md and docs/pipelines.md.
"""

import sys

from hubflow_jobs.pipeline.job import run_builtin

if __name__ == "__main__":
    sys.exit(run_builtin("bronze_to_silver", sys.argv[1:]))
