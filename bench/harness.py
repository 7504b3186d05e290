"""Plumbing every connector/emulator benchmark shares, in one place.

- :func:`start_emulator`: the emulator CLI in a process of its own (through
  ``eventhubs_emulator.launcher``), so it never shares the measured process's GIL;
- :func:`connector_spark`: a local Spark session with the connector registered and the UI off;
- :func:`run_in_processes`: one worker process per argument tuple, each putting its result on a
  queue (the aggregate rate of several readers or writers);
- :func:`run_until_done`: start an ``availableNow`` streaming query, wait, time it, fail on its error;
- :func:`spread`: ``median (min-max)``, how every benchmark prints repeated measurements.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from eventhubs_emulator import EmulatorConfig
from eventhubs_emulator.launcher import EmulatorProcess, start_emulator_process


def start_emulator(workdir: Path, hubs: dict[str, int]) -> EmulatorProcess:
    """The emulator CLI with ``hubs`` (``{name: partition_count}``) on a free port; ``stop()`` ends it."""
    return start_emulator_process(EmulatorConfig.many_hubs(hubs), workdir)


def connector_spark(master: str, conf: dict[str, str] | None = None) -> Any:
    """A local SparkSession (UI and console progress off, log level ERROR) with ``format("eventhubs")``
    and the Python worker and checkpoint settings every hubflow job gets (``PYTHON_WORKER_CONF``,
    ``CHECKPOINT_CONF``); ``conf`` wins."""
    from pyspark.sql import SparkSession

    from hubflow_jobs.runtime.session import CHECKPOINT_CONF, PYTHON_WORKER_CONF
    from pyspark_eventhubs import DefaultSource, register_data_source

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers run this interpreter
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    )
    for key, value in {**PYTHON_WORKER_CONF, **CHECKPOINT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_data_source(spark, DefaultSource)
    return spark


def add_conf_argument(parser: Any) -> None:
    """``--conf key=value`` (repeatable): Spark settings over a bench's own, e.g. for an A/B run."""
    parser.add_argument("--conf", action="append", default=[], help="a Spark setting key=value (repeatable)")


def conf_from(args: Any) -> dict[str, str]:
    """The ``--conf`` settings of ``args`` as a dict."""
    return dict(setting.split("=", 1) for setting in args.conf)


def run_in_processes(
    target: Callable[..., None], arguments: Iterable[tuple], timeout: float = 600
) -> list[Any]:
    """Run ``target(*args, queue)`` in one process per ``args``; the results they put, in arrival order."""
    queue: mp.Queue = mp.Queue()
    procs = [mp.Process(target=target, args=(*args, queue)) for args in arguments]
    for proc in procs:
        proc.start()
    results = [queue.get(timeout=timeout) for _ in procs]
    for proc in procs:
        proc.join()
    return results


def spread(values: list[float], fmt: str = "{:,.0f}") -> str:
    """``median (min-max)`` of repeated measurements, each number formatted with ``fmt``."""
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def run_until_done(writer: Any, what: str) -> tuple[float, Any]:
    """Start ``writer`` (a configured ``DataStreamWriter``, trigger ``availableNow``) and wait for it.

    Returns the seconds from start to termination and the query; raises RuntimeError naming
    ``what`` when the query failed.
    """
    started = time.perf_counter()
    query = writer.start()
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception() is not None:
        raise RuntimeError(f"{what}: {query.exception()}")
    return elapsed, query
