"""spark-submit entry point of the file-landing job: ``spark-submit jobs/files_to_lake.py --config FILE``.

Reads files landing in a folder into a lake table (Delta or parquet), quarantining records that do
not parse: the built-in pipeline ``hubflow_jobs.builtins.files_to_lake``; see docs/jobs.md and
docs/pipelines.md.
"""

import sys

from hubflow_jobs.pipeline.job import run_builtin

if __name__ == "__main__":
    sys.exit(run_builtin("files_to_lake", sys.argv[1:]))
