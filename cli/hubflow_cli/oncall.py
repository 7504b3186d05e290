"""``hubflow oncall JOB start|stop|restart|rewind``: an on-call action from a terminal.

The same core as the job's ``<job>__oncall`` DAG (:mod:`hubflow.operations.oncall`): the action
lock (one action at a time, whoever starts it), the holds and their owners, ``force`` with a
reason, the audit trail (recorded with ``source: cli``), on the job's status folder wherever it is
(local, or ``abfss://`` with the storage credentials in this environment). A started driver is
detached (``spark-submit`` in its own session, ``--master``), so it outlives the command; a rewind
reads the hub with the connection string in ``HUBFLOW_EVENTHUBS_CONNECTION_STRING``, the variable
``hubflow run`` hands to the driver. Who acts is this machine's user and host.

Exit codes: 0 done (or dry run), 1 refused or failed (the reason is printed), 2 a problem with the
registry, the job or the command line, 3 another action is in progress on the job (named).
"""

from __future__ import annotations

import getpass
import os
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

from hubflow.invocation import JobInvocation
from hubflow.operations.oncall import ActionBusy, JobStartError, OnCall, OnCallRefused, OnCallRequest
from hubflow.operations.upgrade import UpgradeRolledBack
from hubflow.registry import RegisteredJob, RegistryError, load_registry, registry_path
from hubflow.status.exit_codes import EXIT_CONFIG_ERROR, EXIT_FAILED, EXIT_LOCKED, EXIT_OK
from hubflow.supervision.detached_process import shipping_log, start_detached
from hubflow_cli.output import mask_job_variables
from hubflow_cli.run import driver_environment

#: The environment variable a rewind reads the hub's connection string from (and that ``hubflow
#: run`` passes to the driver).
CONNECTION_STRING_ENV = "HUBFLOW_EVENTHUBS_CONNECTION_STRING"


def who_acts() -> str:
    """``alice (hubflow oncall on host h1)``: the person at this terminal, for holds and the trail."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = f"uid {os.getuid()}"
    return f"{user} (hubflow oncall on host {socket.gethostname()})"


def oncall_job(
    name: str,
    action: str,
    *,
    registry: Path | None,
    dry_run: bool = False,
    reason: str | None = None,
    force: bool = False,
    rewind_to_enqueued_time: str | None = None,
    rewind_to_sequence_numbers: str | None = None,
    master: str = "local[*]",
    stop_wait: float = 300.0,
    start_timeout: float = 300.0,
) -> int:
    """The ``hubflow oncall`` command: carry out ``action`` on job ``name``; the exit code."""
    try:
        job = load_registry(registry or registry_path()).job(name)
    except RegistryError as exc:
        print(f"hubflow oncall: {exc}")
        return EXIT_CONFIG_ERROR
    mask_job_variables(job.config_path())  # the secrets a started driver or a rewind gets
    if job.mode != "streaming":
        print(
            f"hubflow oncall: job {name} is a scheduled job ({job.dag_id}); on-call actions are for "
            "streaming jobs: run it with hubflow run or backfill it with hubflow backfill"
        )
        return EXIT_CONFIG_ERROR
    try:
        request = OnCallRequest(
            action=action,
            who=who_acts(),
            source="cli",
            dry_run=dry_run,
            reason=reason,
            force=force,
            rewind_to_enqueued_time=rewind_to_enqueued_time,
            rewind_to_sequence_numbers=rewind_to_sequence_numbers,
            stop_wait=timedelta(seconds=stop_wait),
            start_timeout=timedelta(seconds=start_timeout),
        )
    except OnCallRefused as exc:
        print(f"hubflow oncall: {exc}")
        return EXIT_CONFIG_ERROR
    oncall = OnCall(
        job,
        request,
        launch=_launcher(job, master),
        log=_say,
        warn=_say,
        hub=_read_hub if job.eventhubs_conn_id else None,
    )
    try:
        result = oncall.run()
    except ActionBusy as exc:
        print(f"hubflow oncall: {exc}")
        return EXIT_LOCKED
    except (OnCallRefused, JobStartError, UpgradeRolledBack) as exc:
        print(f"hubflow oncall: {exc}")
        return EXIT_FAILED
    print(f"{'dry run of ' if dry_run else ''}{action} of job {name}: done")
    for line in result.get("done") or []:
        print(f"  {line}")
    return EXIT_OK


def _say(message: str, *args: Any) -> None:
    print(message % args if args else message, flush=True)


def _launcher(job: RegisteredJob, master: str) -> Any:
    """spark-submit of the job, detached, in the driver's environment (this one plus the job's)."""

    def launch(log_path: Path, ship_to: str | None, files: Any) -> Any:
        invocation = JobInvocation.run(job, config=files.config, env=files.environment)
        command = invocation.command(master)
        if ship_to:
            command = shipping_log(command, log_path, ship_to)
        return start_detached(command, log_path, {**driver_environment(), **invocation.job_env})

    return launch


def _read_hub() -> tuple[str, dict[str, int], str]:
    """The hub's name and positions, from the connection string in :data:`CONNECTION_STRING_ENV`."""
    from hubflow.operations.rewind import latest_positions

    connection_string = os.environ.get(CONNECTION_STRING_ENV, "")
    if not connection_string:
        raise OnCallRefused(
            f"a rewind reads the hub: set {CONNECTION_STRING_ENV} to the hub's connection string "
            "(Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...;EntityPath=HUB), the one "
            "hubflow run passes to the job"
        )
    hub, latest = latest_positions(connection_string)
    return hub, latest, connection_string
