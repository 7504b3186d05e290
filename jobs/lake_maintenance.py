"""spark-submit entry point of Delta maintenance: ``spark-submit jobs/lake_maintenance.py
--application APP --config FILE [--dry-run] [--vacuum-retention-hours H] [--checkpoint-after-commits N]``.

Compacts, vacuums and checkpoints every Delta table the job ``FILE`` writes (see
``hubflow_jobs.lake.maintenance``), logging sizes before and after. Run by the cleanup DAG through
the same spark-submit path as the job itself, so it gets the job's Spark conf and storage access.
Exit codes: 0 done, 1 failed, 2 bad config or arguments.
"""

import argparse
import logging
import sys
from typing import Any

from hubflow.applications import BUILTIN_PIPELINES, config_model
from hubflow.config import ConfigError, load_config
from hubflow.invocation import (
    ARG_APPLICATION,
    ARG_CHECKPOINT_AFTER_COMMITS,
    ARG_CONFIG,
    ARG_DRY_RUN,
    ARG_VACUUM_RETENTION_HOURS,
)
from hubflow.status.exit_codes import EXIT_CONFIG_ERROR, EXIT_OK
from hubflow_jobs.lake.maintenance import maintain_table
from hubflow_jobs.runtime.runner import configure_logging, run_batch

log = logging.getLogger("hubflow_jobs")


def main(argv: list[str]) -> int:
    configure_logging()
    parser = argparse.ArgumentParser(description="compact, vacuum and checkpoint a job's Delta tables")
    parser.add_argument(
        ARG_APPLICATION,
        required=True,
        help=f"one of {', '.join(sorted(BUILTIN_PIPELINES))} or module:function",
    )
    parser.add_argument(ARG_CONFIG, required=True, help="the job's YAML config file")
    parser.add_argument(ARG_DRY_RUN, action="store_true", help="say what would be done, change nothing")
    parser.add_argument(ARG_VACUUM_RETENTION_HOURS, type=float, default=168.0)
    parser.add_argument(ARG_CHECKPOINT_AFTER_COMMITS, type=int, default=100)
    args = parser.parse_args(argv)
    model = config_model(args.application)
    if model is None:
        parser.error(f"--application {args.application!r}: not one of {', '.join(sorted(BUILTIN_PIPELINES))}")
    try:
        config = load_config(args.config, model)
    except ConfigError as exc:
        log.error("%s", exc)
        return EXIT_CONFIG_ERROR
    tables = config.delta_tables()
    if not tables:
        log.info("job %s writes no Delta table: nothing to maintain", config.name)
        return EXIT_OK

    def work(spark: Any) -> str:
        for table in tables:
            maintain_table(
                spark,
                table,
                retention_hours=args.vacuum_retention_hours,
                checkpoint_after_commits=args.checkpoint_after_commits,
                dry_run=args.dry_run,
            )
        return f"{len(tables)} Delta table(s)" + (" (dry run)" if args.dry_run else "")

    return run_batch(config, "maintenance", work)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
