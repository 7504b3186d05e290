"""spark-submit entry point of a backfill: ``spark-submit jobs/backfill.py --application APP
--config FILE --window-start ISO --window-end ISO``.

Processes exactly one data interval of a job as a batch and replaces that interval's rows: in the
job's own Delta table (one ``replaceWhere`` transaction), or in the parquet side table's partition
(see ``hubflow_jobs.backfill``). ``--application`` is the job's entry script name:
``eventhubs_to_lake`` (the enqueued-time window) or ``files_to_lake`` (the interval's landing or
archive folders). Exit codes as for every job: 0 done, 1 failed, 2 bad config or window.
"""

import argparse
import logging
import sys
from typing import Any

from hubflow_jobs import EXIT_CONFIG_ERROR
from hubflow_jobs.applications import BACKFILL_APPLICATIONS, CONFIG_MODELS
from hubflow_jobs.backfill import (
    BackfillRefused,
    WindowError,
    backfill_eventhubs,
    backfill_files,
    interval_folders,
    parse_window,
)
from hubflow_jobs.config import ConfigError, load_config
from hubflow_jobs.files_to_lake import FilesToLakeConfig
from hubflow_jobs.runner import configure_logging, run_batch

log = logging.getLogger("hubflow_jobs")

#: The applications a backfill can run, with their config model.
BACKFILL_CONFIG_MODELS = {name: CONFIG_MODELS[name] for name in BACKFILL_APPLICATIONS}


def main(argv: list[str]) -> int:
    configure_logging()
    parser = argparse.ArgumentParser(description="backfill one data interval of a job")
    parser.add_argument("--application", required=True, choices=sorted(BACKFILL_CONFIG_MODELS))
    parser.add_argument("--config", required=True, help="the job's YAML config file")
    parser.add_argument("--window-start", required=True, help="ISO-8601, inclusive")
    parser.add_argument("--window-end", required=True, help="ISO-8601, exclusive")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, BACKFILL_CONFIG_MODELS[args.application])
        start, end = parse_window(args.window_start, args.window_end)
        if isinstance(config, FilesToLakeConfig):
            interval_folders(config, start, end)  # a layout or window it cannot use fails before Spark
    except (ConfigError, WindowError) as exc:
        log.error("%s", exc)
        return EXIT_CONFIG_ERROR

    def work(spark: Any) -> dict[str, Any]:
        if isinstance(config, FilesToLakeConfig):
            return backfill_files(spark, config, start, end)
        return {"read": backfill_eventhubs(spark, config, start, end)}

    return run_batch(config, f"backfill [{start}, {end})", work, refused=BackfillRefused)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
