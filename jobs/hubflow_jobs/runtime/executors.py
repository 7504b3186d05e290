"""Waiting for executors: a job on a cluster that gets none fails with a clear message.

On a Spark cluster a new application gets executors only when the cluster has free cores (Spark
standalone: every running application holds up to its ``spark.cores.max``) and its workers can
connect back to the driver. Without them Spark does not fail: tasks wait forever while the driver
logs "Initial job has not accepted any resources". A scheduled run would then hold its Airflow slot
(and a streaming job its supervisor's start) with nothing happening. :func:`wait_for_executors`
runs on the driver right after the session starts and gives the job ``runtime.executor_wait`` to
get its first executor, then raises :class:`NoExecutorsError` saying what to check.

Local mode runs tasks in the driver and needs no executor; with dynamic allocation and no minimum,
executors arrive only once tasks are waiting, so there is nothing to wait for at start either.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger(__name__)


class NoExecutorsError(RuntimeError):
    """The application got no executor within the allowed time."""


def needs_executors(conf: dict[str, str]) -> bool:
    """Whether an application with Spark ``conf`` (``spark.master`` among it) runs tasks on executors
    that must register before it can work."""
    master = conf.get("spark.master", "")
    if master.startswith("local") and not master.startswith("local-cluster"):
        return False
    dynamic = conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true"
    return not (dynamic and int(conf.get("spark.dynamicAllocation.minExecutors", "0")) == 0)


def registered_executors(spark: Any) -> int:
    """Executors registered with the driver now (the driver itself is not counted)."""
    return max(0, len(spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()) - 1)


def wait_for_executors(spark: Any, job: str, timeout_seconds: float, poll_seconds: float = 0.5) -> int:
    """Wait until the application has an executor; return how many it has.

    Raises :class:`NoExecutorsError` after ``timeout_seconds`` without one. Returns at once in local
    mode and with dynamic allocation from zero executors.
    """
    conf = dict(spark.sparkContext.getConf().getAll())
    if not needs_executors(conf):
        return 0
    master = conf.get("spark.master", "?")
    started = time.monotonic()
    while True:
        count = registered_executors(spark)
        if count > 0:
            waited = time.monotonic() - started
            log.info("job %s: %d executor(s) after %.1f s on %s", job, count, waited, master)
            return count
        if time.monotonic() - started >= timeout_seconds:
            raise NoExecutorsError(no_executors_message(job, conf, timeout_seconds))
        time.sleep(poll_seconds)


def no_executors_message(job: str, conf: dict[str, str], timeout_seconds: float) -> str:
    """What went wrong and what to check, naming the master, the core cap and the driver address."""
    master = conf.get("spark.master", "?")
    cores = conf.get("spark.cores.max", "not set")
    driver = f"{conf.get('spark.driver.host', '?')}:{conf.get('spark.driver.port', '?')}"
    return (
        f"job {job} got no executor from {master} within {timeout_seconds:.0f} s (runtime.executor_wait). "
        f"Either the cluster has no free cores for it (it asks for spark.cores.max={cores}; other "
        "applications hold theirs: see the master's web UI, lower their cores_max in the registry or add "
        f"workers), or the workers cannot connect back to this driver at {driver}"
    )
