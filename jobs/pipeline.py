"""spark-submit entry point of every pipeline.

``spark-submit jobs/pipeline.py --pipeline MODULE:FUNCTION --config FILE``.

Runs the user's pipeline function (``pipelines/<module>.py`` or an installed package) on the sources
and sinks its config declares; see ``hubflow_jobs.pipeline`` and docs/pipelines.md.
"""

import sys

from hubflow_jobs.pipeline.job import run_pipeline

if __name__ == "__main__":
    sys.exit(run_pipeline(sys.argv[1:]))
