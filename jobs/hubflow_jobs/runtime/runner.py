"""The life of a job run: config, lease, session, query, supervision, graceful stop, exit code.

An entry script only names its config model and a function that starts its streaming query::

    from hubflow_jobs.runtime.runner import main
    sys.exit(main(sys.argv[1:], MyJobConfig, start_my_query))

:func:`main` validates the config before Spark starts (exit 2), takes the lease of the job's
checkpoint (exit 3 while another instance holds it), refuses to start while on-call holds the job
(exit 4), starts the watchdog (lease renewal, heartbeat, STOP/HOLD/KILL markers;
:mod:`hubflow_jobs.runtime.watchdog`), builds the session, then :func:`run_job` supervises the query: on a
stop request it lets the running batch finish before ``query.stop()`` (exit 0), and it reports a
failure with its reason on the last log line and in status.json's ``outcome`` (exit 1). A lost lease
(exit 5) or a kill request (exit 6) ends the driver hard, from the watchdog.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from hubflow.config import ConfigError, JobConfig, load_config
from hubflow.invocation import ARG_CONFIG
from hubflow.progress.source_backlog import SourceBacklogs
from hubflow.redaction import redact
from hubflow.status import HOLD_MARKER, JobState, JobStatus, Lease, LeaseHeldError, StatusFolder
from hubflow.status.exit_codes import (
    EXIT_CONFIG_ERROR,
    EXIT_FAILED,
    EXIT_HELD,
    EXIT_KILLED,
    EXIT_LEASE_LOST,
    EXIT_LOCKED,
    EXIT_OK,
)
from hubflow.status.process_identity import process_fields
from hubflow_jobs.runtime.executors import NoExecutorsError
from hubflow_jobs.runtime.listener import StatusListener
from hubflow_jobs.runtime.query_group import last_batch_id, stop_after_batch
from hubflow_jobs.runtime.query_start import WorkerStartTimedOut, check_worker_start, start_attempts
from hubflow_jobs.runtime.session import build_session
from hubflow_jobs.runtime.stop import (
    SignalHandlers,
    StopRequest,
    install_jvm_sigterm_handler,
    restore_jvm_sigterm_handler,
)
from hubflow_jobs.runtime.watchdog import HardExit, StopQueries, Watchdog

log = logging.getLogger("hubflow_jobs")

#: How long a finishing job waits for its last batch's progress event (Spark's listener bus is
#: asynchronous) before it writes the final state anyway.
PROGRESS_DELIVERY_TIMEOUT = 30.0

ConfigT = TypeVar("ConfigT", bound=JobConfig)
#: Starts the job's streaming query; gets the session, the validated config and the live status.
StartQuery = Callable[[Any, ConfigT, JobStatus], Any]


#: A driver log line: UTC time, level, logger, message.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class MaskingFormatter(logging.Formatter):
    """A formatter whose lines (message, exception and stack included) have their secrets masked
    (:func:`hubflow.redaction.redact`): the driver log holds no secret the Python side wrote."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def configure_logging() -> None:
    """Log to stderr with UTC timestamps, the way spark-submit's own output reads, secrets masked."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        force=True,
    )
    logging.Formatter.converter = time.gmtime
    for handler in logging.getLogger().handlers:
        handler.setFormatter(MaskingFormatter(LOG_FORMAT))
    # Py4J logs every callback at INFO; that drowns the job's own lines.
    logging.getLogger("py4j").setLevel(logging.WARNING)


def parse_args(argv: Sequence[str], description: str) -> argparse.Namespace:
    """The command line every job takes: ``--config FILE``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(ARG_CONFIG, required=True, help="the job's YAML config file (see docs/jobs.md)")
    return parser.parse_args(list(argv))


def main(argv: Sequence[str], model: type[ConfigT], start_query: StartQuery, description: str = "") -> int:
    """Run a job from the command line and return its exit code (see :mod:`hubflow_jobs`)."""
    configure_logging()
    args = parse_args(argv, description)
    try:
        config = load_config(args.config, model)
    except ConfigError as exc:
        log.error("%s", exc)
        return EXIT_CONFIG_ERROR

    log.info("job %s starting (runtime %s, config %s)", config.name, _runtime_origin(), args.config)
    folder = StatusFolder(config.status_dir)
    lease = Lease(folder, config.name, config.runtime.lease_timing())
    try:
        lease.acquire()
    except LeaseHeldError as exc:
        log.error("refusing to start: %s", exc)
        return EXIT_LOCKED
    hold = folder.hold()
    if hold is not None:
        lease.release()
        log.error(
            "refusing to start: job %s is held by on-call %s. Start it with the on-call DAG "
            "(action start or restart), which releases the hold, or remove %s",
            config.name,
            hold.describe(),
            folder.path(HOLD_MARKER),
        )
        return EXIT_HELD

    stop = StopRequest()
    status = JobStatus(folder, config.name)
    fence = HardExit(config.name, status, lease)
    watchdog = Watchdog(folder, status, stop, config.runtime, fence, lease=lease)
    spark = None
    outcome: tuple[int, str] = (EXIT_FAILED, f"job {config.name} failed before its query started")
    try:
        clear_leftover_requests(folder)
        # At once (the session is slow); the JVM by pid and start time, so a stop signals only it.
        status.update(state=JobState.STARTING, **process_fields(fence.jvm_pid, "jvm_pid"))
        watchdog.start()
        with SignalHandlers(stop):
            spark = build_session(config)
            fence.attach(spark)
            status.update(**process_fields(fence.jvm_pid, "jvm_pid"))
            previous_handler = install_jvm_sigterm_handler(spark, stop)
            try:
                outcome = run_job(spark, config, start_query, stop, status=status, watchdog=watchdog)
            finally:
                restore_jvm_sigterm_handler(spark, previous_handler)
    except Exception as exc:
        log.exception("job %s failed", config.name)
        outcome = (EXIT_FAILED, f"job {config.name} failed: {one_line(exc)}")
    finally:
        if spark is not None:
            _stop_session_quietly(spark)
        else:
            _quiet_jvm()  # a session that failed to start may leave its JVM up, logging at INFO
        record_outcome(status, *outcome)
        watchdog.close()
        lease.release()  # after the session: nothing of this run writes the checkpoint any more
    code, reason = outcome
    # The reason is also the run's last log line: Spark is stopped and its JVM logs only errors now.
    (log.info if code == EXIT_OK else log.error)("%s", reason)
    return code


def record_outcome(status: JobStatus, code: int, reason: str) -> None:
    """Write the run's exit code and one-line reason to status.json (``exit_code``, ``outcome``),
    where the operator and ``hubflow run`` read it: the driver log's last line is not reliably the
    reason, since Spark's JVM may still log after the Python driver ends. A run that lost its lease
    writes nothing (the folder is another instance's now)."""
    if code == EXIT_LEASE_LOST:
        return
    try:
        status.update(exit_code=code, outcome=reason)
    except Exception as exc:  # the reason still reaches the log
        log.warning("could not write the outcome to status.json: %s", exc)


def run_batch(
    config: JobConfig,
    what: str,
    work: Callable[[Any], Any],
    refused: type[Exception] | None = None,
    invalid: type[Exception] | None = None,
) -> int:
    """Run ``work(spark)`` once on a session for ``config`` and stop it; the exit code.

    The shape of the batch entry scripts (backfill, lake maintenance): a cluster with no executors or
    a failure is ``job <name> <what> failed: <why>`` and exit 1; ``refused`` is an expected refusal,
    logged as its own message, exit 1 too; ``invalid`` is a mistake in the job's definition found
    only once Spark runs, logged as its own message, exit 2 (no retry cures it); success logs
    ``job <name> <what> finished: <result>``.
    """
    try:
        spark = build_session(config)
    except NoExecutorsError as exc:
        log.error("job %s %s failed: %s", config.name, what, exc)
        return EXIT_FAILED
    try:
        result = work(spark)
    except Exception as exc:
        if refused is not None and isinstance(exc, refused):
            log.error("%s", exc)
            return EXIT_FAILED
        if invalid is not None and isinstance(exc, invalid):
            log.error("%s", exc)
            return EXIT_CONFIG_ERROR
        log.exception("job %s %s failed", config.name, what)
        log.error("job %s %s failed: %s", config.name, what, one_line(exc))
        return EXIT_FAILED
    finally:
        _stop_session_quietly(spark)
    log.info("job %s %s finished: %s", config.name, what, result)
    return EXIT_OK


def run_job(
    spark: Any,
    config: ConfigT,
    start_query: StartQuery,
    stop: StopRequest,
    status: JobStatus | None = None,
    watchdog: Watchdog | None = None,
) -> tuple[int, str]:
    """Start the job's query on ``spark`` and supervise it until it ends; return (exit code, reason).

    Usable without :func:`main` (tests run it on a shared session): without a ``watchdog`` it
    starts one that has no lease and whose fence stops the session's queries
    (:class:`~hubflow_jobs.runtime.watchdog.StopQueries`); it does not take a lease, clear leftover
    markers, install signal handlers or stop the session.
    """
    folder = StatusFolder(config.status_dir)
    if status is None:
        status = JobStatus(folder, config.name)
        status.update(state=JobState.STARTING)
    own_watchdog = watchdog is None
    if watchdog is None:
        watchdog = Watchdog(folder, status, stop, config.runtime, StopQueries(spark)).start()
    listener = StatusListener(status, SourceBacklogs(getattr(config, "checkpoint_location", None)))
    spark.streams.addListener(listener)
    try:
        try:
            query = _start_and_supervise(spark, config, start_query, stop, status, watchdog, listener)
        except _QueryNotStarted as failed:
            exc = failed.__cause__
            status.update(state=JobState.FAILED, exception=f"{type(exc).__name__}: {exc}")
            return EXIT_FAILED, f"job {config.name} failed to start its query: {one_line(exc)}"
        return _finish(query, config, status, stop, watchdog, listener)
    finally:
        spark.streams.removeListener(listener)
        if own_watchdog:
            watchdog.close()


class _QueryNotStarted(Exception):
    """``start_query`` raised (its error is the ``__cause__``); never retried."""


def _start_and_supervise(
    spark: Any,
    config: ConfigT,
    start_query: StartQuery,
    stop: StopRequest,
    status: JobStatus,
    watchdog: Watchdog,
    listener: StatusListener,
) -> Any:
    """Start the query and supervise it until it ends or a stop is requested; return the query.

    A query that failed because Spark's Python worker for its source did not connect back in time
    is started again (:mod:`hubflow_jobs.runtime.query_start`); the last attempt's query is returned, and
    :func:`_finish` reports how it ended.
    """

    def prepare_retry(failed: Any, attempt: int) -> None:
        listener.forget_run(failed.runId)
        status.restart_query(attempt, one_line(failed.exception()))

    query = None
    try:
        for attempt in start_attempts(config.name, config.runtime.start_attempts, stop, prepare_retry):
            with attempt:
                if query is not None and stop.requested:
                    return query  # asked to stop during the pause: not started again
                try:
                    query = start_query(spark, config, status)
                except Exception as exc:
                    log.exception("job %s: starting the query failed", config.name)
                    raise _QueryNotStarted() from exc
                checkpoint = config.checkpoint_location
                log.info("job %s started query %s (checkpoint %s)", config.name, query.id, checkpoint)
                _supervise(query, config, status, stop, watchdog)
                if watchdog.fenced is None:
                    check_worker_start(query)
    except WorkerStartTimedOut as last:
        return last.query  # no attempt left, or a stop was requested: _finish reports the failure
    return query


#: The error class of Spark's refusals of a query in real-time mode (an operator or a sink it cannot run).
REAL_TIME_MODE_ERROR = "STREAMING_REAL_TIME_MODE"


def real_time_refusal(config: JobConfig, exception: Any) -> str | None:
    """What to tell the user when Spark's real-time mode refused the query's plan, else None: the
    config cannot run as it is, so the run is not worth a retry. Runs on the driver."""
    text = str(exception)
    if REAL_TIME_MODE_ERROR not in text:
        return None
    return (
        f"job {config.name}: trigger.realTime: Spark's real-time mode cannot run this pipeline "
        f"({one_line(exception)}). It runs stateless pipelines (select, filter, UDFs) from "
        "eventhubs_kafka to eventhubs_kafka: use processingTime for one that aggregates, joins or "
        'deduplicates (docs/pipelines.md, "Real-time pipelines")'
    )


def clear_leftover_requests(folder: StatusFolder) -> list[str]:
    """Remove STOP and KILL markers found before the job starts; they were meant for an earlier run.

    Called right after the lease is taken, before the (slow) session start, so a marker written
    while the session starts does reach this run. Returns the names removed.
    """
    removed = folder.clear_requests()
    for name in removed:
        log.warning("removing the %s marker %s left for an earlier run", name, folder.path(name))
    return removed


def _supervise(
    query: Any, config: JobConfig, status: JobStatus, stop: StopRequest, watchdog: Watchdog
) -> None:
    """Wait for the query to end or for a stop request (the watchdog turns markers into those)."""
    poll_every = config.runtime.seconds("poll_interval")
    while query.isActive:
        if stop.requested:
            if watchdog.fenced is not None:
                return  # the fence stops the query by itself
            log.info(
                "job %s: stop requested (%s); letting the running batch finish", config.name, stop.reason
            )
            status.update(state=JobState.STOPPING, stop_reason=stop.reason)
            stop_after_batch(query, config.runtime.seconds("stop_timeout"), poll_every)
            return
        try:
            query.awaitTermination(poll_every)
        except Exception:
            return  # the query failed; _finish reports query.exception()


def _finish(
    query: Any,
    config: JobConfig,
    status: JobStatus,
    stop: StopRequest,
    watchdog: Watchdog,
    listener: StatusListener,
) -> tuple[int, str]:
    """Write the final state and return (exit code, reason)."""
    if watchdog.fenced is not None:
        reason, code = watchdog.fenced
        if code == EXIT_KILLED:  # this run still holds the folder (a lost lease leaves it alone)
            status.update(state=JobState.STOPPED, stop_reason=reason)
        return code, f"job {config.name} {reason}"
    exception = query.exception()
    if exception is not None:
        refused = real_time_refusal(config, exception)
        status.update(state=JobState.FAILED, exception=refused or str(exception))
        if refused:
            return EXIT_CONFIG_ERROR, refused
        return EXIT_FAILED, f"job {config.name} failed: {one_line(exception)}"
    if stop.requested:
        reason = f"job {config.name} stopped gracefully: {stop.reason}"
    else:
        reason = f"job {config.name} finished: no more input (trigger availableNow)"
    last_batch = last_batch_id(query)
    if not listener.wait_for_batch(last_batch, PROGRESS_DELIVERY_TIMEOUT):
        log.warning(
            "job %s: the progress of batch %s did not reach the status within %.0f s; "
            "status.json's last_progress may show an earlier batch",
            config.name,
            last_batch,
            PROGRESS_DELIVERY_TIMEOUT,
        )
    status.update(state=JobState.STOPPED, stop_reason=stop.reason)
    return EXIT_OK, reason


def _runtime_origin() -> str:
    """Where this package was imported from: the repo's jobs/ or the --py-files zip."""
    import hubflow_jobs

    return str(Path(hubflow_jobs.__file__).parent)


#: The starts of the lines of Spark's state errors that name what changed (the schema or the
#: operators the checkpoint's state has, and the query's): told after the first line, so a version
#: whose state no longer fits its checkpoint (a failed upgrade) says what changed.
STATE_CHANGE_LINES = ("Existing key_schema=", "Existing value_schema=", "Stateful operators in the metadata:")


def one_line(error: BaseException, limit: int = 600) -> str:
    """The first line of an error's message, prefixed with its type, for the run's last log line.

    Spark's messages often continue with the offending SQL and a caret line; the full text goes to
    status.json and to the log above. A state error's line naming what changed
    (:data:`STATE_CHANGE_LINES`) is kept, and the innermost cause is added unless it says the same.
    """
    lines = _lines(str(error))
    text = f"{type(error).__name__}: {lines[0] if lines else repr(error)}"
    cause = _root_cause(error)
    cause_lines = _lines(cause) if cause else []
    changed = next((line for line in lines + cause_lines if line.startswith(STATE_CHANGE_LINES)), None)
    if changed:
        text = f"{text} {changed}"
    if cause_lines and cause_lines[0] not in lines[:1]:
        text = f"{text} caused by {cause_lines[0]}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _root_cause(error: BaseException) -> str | None:
    """For a Py4JJavaError (whose first line is only "An error occurred while calling o204.load."):
    the innermost Java cause's class and message, e.g. hadoop-azure's token refusal, or None. The
    same for a captured Spark error with causes (a StreamingQueryException's first line can be only
    "Failed to create new KafkaAdminClient" when Entra ID refused the Kafka client's login)."""
    java = getattr(error, "java_exception", None)
    if java is None:
        return _captured_root_cause(error)
    try:
        cause, seen = java, 0
        while cause.getCause() is not None and seen < 20:
            cause, seen = cause.getCause(), seen + 1
        text = str(cause.toString()).strip()
    except Exception:  # the JVM is gone: the first line is all there is
        return None
    return text or None


def _captured_root_cause(error: BaseException) -> str | None:
    """The innermost cause of pyspark's captured error (each holds its Java cause, converted, in
    ``_cause``; an unknown Java class's text is ``<class>: <message>``), or None without causes."""
    cause, seen = error, 0
    while getattr(cause, "_cause", None) is not None and seen < 20:
        cause, seen = cause._cause, seen + 1  # type: ignore[attr-defined]
    if seen == 0:
        return None
    return str(cause).strip() or None


def _stop_session_quietly(spark: Any) -> None:
    """Stop Spark with its log level at ERROR, so the job's own last line stays last."""
    try:
        spark.sparkContext.setLogLevel("ERROR")
        spark.stop()
    except Exception as exc:
        log.warning("stopping the Spark session failed: %s", exc)


def _quiet_jvm() -> None:
    """Set the driver JVM's root log level to ERROR when a JVM is up without a session (the session
    failed to start): its shutdown hooks would log at INFO after the job's last line."""
    from pyspark.context import SparkContext

    jvm = SparkContext._jvm
    if jvm is None:
        return
    try:
        jvm.org.apache.logging.log4j.core.config.Configurator.setRootLevel(
            jvm.org.apache.logging.log4j.Level.ERROR
        )
    except Exception as exc:
        log.debug("could not lower the JVM's log level: %s", exc)
