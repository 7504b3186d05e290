"""The ``hubflow`` command line: ``check``, ``new pipeline``, ``run``, ``backfill``, ``oncall``, ``status``
(docs/cli.md).

Exit codes: 0 when all is well, 2 for a problem in the registry, a config, a pipeline or the
command line itself (nothing was started), and for ``run`` and ``backfill`` the job's own exit code
(:mod:`hubflow_jobs`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from hubflow.status.exit_codes import EXIT_CONFIG_ERROR
from hubflow.supervision.supervisor import ONCALL_ACTIONS
from hubflow_cli.scaffold import SOURCE_KINDS, TRIGGERS


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="hubflow", description="Check, scaffold, run and watch hubflow jobs (docs/cli.md)."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    registry_help = "the job registry (default: $HUBFLOW_REGISTRY, else the repository's dags/registry.yaml)"

    check = commands.add_parser(
        "check",
        help="validate the registry, every job's config and every pipeline's binding (no Spark)",
        description="Validate the registry, every job's config and every pipeline's binding (no Spark).",
    )
    check.add_argument("--registry", type=Path, help=registry_help)
    check.add_argument("--job", help="check only this registered job")
    check.add_argument("--config", type=Path, help="check this job config alone, without a registry")
    check.add_argument("--pipeline", metavar="MODULE:FUNCTION", help="with --config: the pipeline function")
    check.add_argument("--application", help="with --config: a built-in application, e.g. files_to_lake")
    check.add_argument(
        "--local",
        action="store_true",
        help="also count what only this machine can check (local folders, environment variables) as problems",
    )

    new = commands.add_parser("new", help="create something new from a template")
    kinds = new.add_subparsers(dest="what", required=True, metavar="WHAT")
    pipeline = kinds.add_parser(
        "pipeline",
        help="a pipeline: its function, config, unit test and registry entry",
        description="Write a pipeline's function, config and unit test, and append its registry entry.",
    )
    pipeline.add_argument("name", help="the pipeline's name: module, job, checkpoint and status folder name")
    pipeline.add_argument(
        "--source-kind",
        choices=SOURCE_KINDS,
        default=None,
        help="default: files (eventhubs_kafka: the hub through its Kafka endpoint; the only kind of "
        "--trigger realtime, and its default)",
    )
    pipeline.add_argument(
        "--trigger",
        choices=TRIGGERS,
        default="available-now",
        help="available-now (default): a scheduled job; realtime: a streaming job in Spark's real-time "
        'mode, from a hub to another hub (docs/pipelines.md, "Real-time pipelines")',
    )
    pipeline.add_argument("--force", action="store_true", help="overwrite the pipeline's files if they exist")
    pipeline.add_argument(
        "--dir",
        type=Path,
        help="the pipelines folder (default: $HUBFLOW_PIPELINES_DIR, else the repository's pipelines/)",
    )
    pipeline.add_argument(
        "--data-dir", type=Path, help="the config's local data folder (default: DIR/../data)"
    )
    pipeline.add_argument("--registry", type=Path, help=registry_help)

    run = commands.add_parser(
        "run",
        help="run a registered job in the foreground on local Spark",
        description="Run a registered job in the foreground on local Spark; Ctrl-C stops it gracefully.",
    )
    run.add_argument("job", help="the registered job's name")
    run.add_argument("--once", action="store_true", help="process what is available now, then exit")
    run.add_argument("--registry", type=Path, help=registry_help)
    run.add_argument("--master", default="local[*]", help="Spark master (default: local[*])")
    run.add_argument(
        "--every", type=float, default=5.0, metavar="SECONDS", help="progress line interval (default: 5)"
    )

    backfill = commands.add_parser(
        "backfill",
        help="process one data interval of a registered job again, replacing its rows (local Spark)",
        description="Process one data interval [START, END) of a registered job again on local Spark, "
        "replacing the interval's rows in its tables, as an Airflow backfill run does.",
    )
    backfill.add_argument("job", help="the registered job's name")
    backfill.add_argument("--start", required=True, help="the interval's start, ISO-8601 (UTC unless given)")
    backfill.add_argument("--end", required=True, help="the interval's end (exclusive), ISO-8601")
    backfill.add_argument("--registry", type=Path, help=registry_help)
    backfill.add_argument("--master", default="local[*]", help="Spark master (default: local[*])")

    oncall = commands.add_parser(
        "oncall",
        help="start, stop, restart or rewind a streaming job, as its <job>__oncall DAG does",
        description="An on-call action on a registered streaming job, on the same core as its "
        "<job>__oncall DAG: one action at a time, holds with owners, the audit trail (docs/cli.md).",
    )
    oncall.add_argument("job", help="the registered streaming job's name")
    oncall.add_argument("action", choices=ONCALL_ACTIONS, help="what to do")
    oncall.add_argument("--dry-run", action="store_true", help="say what would be done, do nothing")
    oncall.add_argument(
        "--reason", help="why (stop: shown with the hold; with --force: why the hold is taken over)"
    )
    oncall.add_argument(
        "--force",
        action="store_true",
        help="take over a hold another action placed (a rewind, an upgrade, a quarantine); needs --reason",
    )
    oncall.add_argument(
        "--rewind-to-enqueued-time", metavar="ISO", help="rewind: every partition from this enqueued time"
    )
    oncall.add_argument(
        "--rewind-to-sequence-numbers",
        metavar="JSON",
        help="rewind: partition -> sequence number, e.g. '{\"0\": 120}'",
    )
    oncall.add_argument("--registry", type=Path, help=registry_help)
    oncall.add_argument(
        "--master", default="local[*]", help="Spark master of a started driver (default: local[*])"
    )
    oncall.add_argument(
        "--stop-wait",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="graceful stop, then kill (default: 300)",
    )
    oncall.add_argument(
        "--start-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how long a started job has to report running (default: 300)",
    )

    status = commands.add_parser(
        "status",
        help="the status page's facts of every job (or one)",
        description="State, last batch, lag, hold and lease of every registered job (or one).",
    )
    status.add_argument("job", nargs="?", help="one registered job (default: all)")
    status.add_argument("--registry", type=Path, help=registry_help)
    status.add_argument("--json", action="store_true", help="print the snapshots as JSON")
    return parser


def _check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from hubflow.registry import registry_path
    from hubflow_cli.check import check_job_config, check_registry, report

    if args.config is None:
        if args.pipeline or args.application:
            parser.error("--pipeline and --application go with --config")
        path = args.registry or registry_path()
        results, problem = check_registry(path, args.job)
        if problem:
            print(f"FAIL  {problem}")
            return EXIT_CONFIG_ERROR
        return report(results, args.local)
    if bool(args.pipeline) == bool(args.application):
        parser.error("--config needs one of --pipeline MODULE:FUNCTION or --application NAME")
    if args.registry or args.job:
        parser.error("--config checks one config without a registry; leave out --registry and --job")
    application = args.pipeline or args.application
    if args.pipeline and ":" not in args.pipeline:
        parser.error(f"--pipeline {args.pipeline!r}: write it as module:function")
    return report([check_job_config(application, args.config)], args.local)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``hubflow`` console script; returns (and exits with) the command's exit code. Everything it
    prints has its secrets masked (:mod:`hubflow_cli.output`)."""
    from hubflow_cli.output import masked_output

    with masked_output():
        return _run(argv)


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "check":
        code = _check(args, parser)
    elif args.command == "new":
        from hubflow_cli.new import new_pipeline

        code = new_pipeline(
            args.name,
            args.source_kind,
            folder=args.dir,
            data=args.data_dir,
            registry=args.registry,
            force=args.force,
            trigger=args.trigger,
        )
    elif args.command == "run":
        from hubflow_cli.run import run_job

        code = run_job(args.job, registry=args.registry, once=args.once, master=args.master, every=args.every)
    elif args.command == "backfill":
        from hubflow_cli.backfill import backfill_job

        code = backfill_job(
            args.job, start=args.start, end=args.end, registry=args.registry, master=args.master
        )
    elif args.command == "oncall":
        from hubflow_cli.oncall import oncall_job

        code = oncall_job(
            args.job,
            args.action,
            registry=args.registry,
            dry_run=args.dry_run,
            reason=args.reason,
            force=args.force,
            rewind_to_enqueued_time=args.rewind_to_enqueued_time,
            rewind_to_sequence_numbers=args.rewind_to_sequence_numbers,
            master=args.master,
            stop_wait=args.stop_wait,
            start_timeout=args.start_timeout,
        )
    else:
        from hubflow_cli.status import show_status

        code = show_status(args.job, registry=args.registry, as_json=args.json)
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
