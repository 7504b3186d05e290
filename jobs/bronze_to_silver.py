"""spark-submit entry point of the silver job: ``spark-submit jobs/bronze_to_silver.py --config FILE``.

Reads the bronze Delta table of eventhubs_to_lake incrementally and writes typed silver rows,
quarantining bodies that do not parse; see ``hubflow_jobs.bronze_to_silver`` and docs/delta.md.
"""

import sys

from hubflow_jobs.runner import run_application

if __name__ == "__main__":
    sys.exit(run_application("bronze_to_silver", sys.argv[1:]))
