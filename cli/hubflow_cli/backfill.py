"""``hubflow backfill JOB --start ISO --end ISO``: one interval of a registered job again, on local Spark.

What an Airflow backfill run of the job does (``SparkJobOperator``), in the foreground: the job is
checked first (nothing starts on a problem), then ``spark-submit jobs/backfill.py --application APP
--config FILE --window-start START --window-end END`` replaces the interval's rows in the job's tables
(docs/pipelines.md, docs/operations.md). Its output goes to ``backfill.log`` beside the job's driver
log; the outcome line is printed, and the log's last lines when it fails. The exit code is the
backfill's: 0 done, 1 failed or refused (the reason is printed), 2 a problem with the job or window,
3 an on-call action in progress on the job (:mod:`hubflow.status.action_lock`).
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from hubflow.applications import backfill_builtins, can_backfill
from hubflow.invocation import JobInvocation
from hubflow.lake_assets import job_tables
from hubflow.operations.job_control import JobControl
from hubflow.partitions import backfill_dag_id
from hubflow.registry import load_registry, registry_path
from hubflow.status.action_lock import ActionInProgress, refuse_if_in_progress
from hubflow.status.exit_codes import EXIT_CONFIG_ERROR, EXIT_LOCKED, EXIT_OK
from hubflow.supervision.detached_process import start_detached
from hubflow_cli.run import LOG_TAIL_LINES, Foreground, checked_job, driver_environment, log_tail
from hubflow_jobs.backfill_window import WindowError, parse_window

#: Where the backfill's output goes: beside the job's driver log.
BACKFILL_LOG = "backfill.log"


def backfill_job(name: str, *, start: str, end: str, registry: Path | None, master: str = "local[*]") -> int:
    """The ``hubflow backfill`` command: the backfill's exit code."""
    try:
        parse_window(start, end)
    except WindowError as exc:
        print(f"hubflow backfill: {exc}")
        return EXIT_CONFIG_ERROR
    checked = checked_job(name, registry, "backfill")
    if checked is None:
        return EXIT_CONFIG_ERROR
    job, paths = checked
    if not can_backfill(job.application):
        print(
            f"hubflow backfill: job {name} runs {job.application}; backfills run for "
            f"{', '.join(backfill_builtins())} jobs and pipelines"
        )
        return EXIT_CONFIG_ERROR
    control = JobControl(job.name, paths.status_dir)
    try:
        refuse_if_in_progress(control.folder, job.name, "backfill")
    except ActionInProgress as exc:
        print(f"hubflow backfill: {exc}")
        return EXIT_LOCKED
    driver_log, _ = control.driver_log_target()
    log_path = driver_log.with_name(BACKFILL_LOG)
    command = JobInvocation.backfill(job, start, end).command(master)
    print(f"backfilling job {job.name} [{start}, {end}): {' '.join(command)}")
    print(f"log: {log_path}")
    note = downstream_note(job.name, paths, registry)
    if note:
        print(note)
    process = start_detached(command, log_path, driver_environment(), append=False)
    foreground = Foreground(process, lambda text: print(text, flush=True))
    previous = {sig: signal.signal(sig, foreground.on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = process.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    code = code if code >= 0 else 128 - code
    outcome = _outcome(log_path, job.name)
    if outcome:
        print(outcome)
    if code != EXIT_OK:
        print(f"backfill of job {job.name} exited {code}; the last lines of {log_path}:")
        print(log_tail(log_path, LOG_TAIL_LINES))
    return code


def downstream_note(name: str, paths: Any, registry: Path | None) -> str | None:
    """What this backfill does not do for the jobs scheduled on the job's tables: outside Airflow no
    asset event is sent, so their ``__follow`` DAGs do not replace the interval (docs/airflow.md,
    "Downstream follows a backfilled hour"). None when no job is scheduled on them."""
    tables = [table.name for table in job_tables(paths.delta_tables, paths.parquet_outputs)]
    downstream = [job.name for job in load_registry(registry or registry_path()).jobs_on_tables(tables)]
    if not downstream:
        return None
    return (
        f"note: {', '.join(downstream)} read {name}'s tables and do not follow a backfill run outside "
        f"Airflow: backfill the same interval of each with hubflow backfill, or backfill the hours in "
        f"Airflow through {backfill_dag_id(name)}, which they follow"
    )


def _outcome(log_path: Path, job: str) -> str | None:
    """The backfill's last line about the job: ``job <name> backfill ...`` (finished, refused, failed)."""
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    found = [line for line in lines if f"job {job} backfill" in line]
    return found[-1] if found else None
