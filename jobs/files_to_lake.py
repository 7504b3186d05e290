"""spark-submit entry point of the file-landing job: ``spark-submit jobs/files_to_lake.py --config FILE``.

Reads files landing in a folder into a lake table (Delta or parquet), quarantining records that do
not parse; see ``hubflow_jobs.files_to_lake`` and docs/jobs.md.
"""

import sys

from hubflow_jobs.runner import run_application

if __name__ == "__main__":
    sys.exit(run_application("files_to_lake", sys.argv[1:]))
