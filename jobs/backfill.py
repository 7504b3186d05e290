"""spark-submit entry point of a backfill: ``spark-submit jobs/backfill.py --application APP
--config FILE --window-start ISO --window-end ISO``.

Processes exactly one data interval of a job as a batch and replaces that interval's rows: in the
job's own Delta tables (one ``replaceWhere`` transaction each), or in the parquet side table's
partition (see ``hubflow_jobs.pipeline.backfill``). ``--application`` is the job's registry
``application``: a pipeline ``MODULE:FUNCTION`` or a built-in that is one (``eventhubs_to_lake``:
the enqueued-time window of its Event Hub; ``files_to_lake``: the interval's landing or archive
folders). Exit codes as for every job: 0 done, 1 failed or refused, 2 bad config, window or pipeline.
"""

import argparse
import logging
import sys
from typing import Any

from hubflow.applications import backfill_builtins, can_backfill
from hubflow.config import ConfigError
from hubflow.invocation import ARG_APPLICATION, ARG_CONFIG, ARG_WINDOW_END, ARG_WINDOW_START
from hubflow.status.exit_codes import EXIT_CONFIG_ERROR
from hubflow_jobs.backfill_window import BackfillRefused, WindowError, parse_window
from hubflow_jobs.pipeline.binding import PipelineError
from hubflow_jobs.runtime.runner import configure_logging, run_batch

log = logging.getLogger("hubflow_jobs")


def main(argv: list[str]) -> int:
    configure_logging()
    parser = argparse.ArgumentParser(description="backfill one data interval of a job")
    parser.add_argument(
        ARG_APPLICATION,
        required=True,
        help=f"{', '.join(backfill_builtins())}, or a pipeline MODULE:FUNCTION",
    )
    parser.add_argument(ARG_CONFIG, required=True, help="the job's YAML config file")
    parser.add_argument(ARG_WINDOW_START, required=True, help="ISO-8601, inclusive")
    parser.add_argument(ARG_WINDOW_END, required=True, help="ISO-8601, exclusive")
    args = parser.parse_args(argv)
    if not can_backfill(args.application):
        log.error(
            "--application %s: a backfill runs %s jobs and pipelines (MODULE:FUNCTION)",
            args.application,
            ", ".join(backfill_builtins()),
        )
        return EXIT_CONFIG_ERROR
    try:
        start, end = parse_window(args.window_start, args.window_end)
        return _backfill_pipeline(args.application, args.config, start, end)
    except (ConfigError, WindowError, PipelineError) as exc:
        log.error("%s", exc)
        return EXIT_CONFIG_ERROR


def _backfill_pipeline(application: str, config_path: str, start: Any, end: Any) -> int:
    """The backfill of a pipeline job; its config, function and window are checked before Spark starts."""
    from hubflow_jobs.pipeline.backfill import backfill_pipeline, backfill_problem, check_window
    from hubflow_jobs.pipeline.job import load_pipeline, ship_module

    config, binding = load_pipeline(application, config_path)
    problem = backfill_problem(config, binding)
    if problem:
        raise PipelineError(problem)
    check_window(config, start, end)

    def work(spark: Any) -> dict[str, int]:
        ship_module(spark, binding)
        return backfill_pipeline(spark, config, binding, start, end)

    what = f"backfill [{start}, {end})"
    return run_batch(config, what, work, refused=BackfillRefused, invalid=PipelineError)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
