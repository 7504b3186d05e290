"""Reused Spark Python workers freeze what they hold once (``worker_gc.py``), so the collection
PySpark's daemon runs after every task walks only what came later. Each check runs in a process
of its own: a freeze lasts for the life of the process that made it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

CONNECTION = "Endpoint=sb://127.0.0.1/;SharedAccessKeyName=k;SharedAccessKey=secret;EntityPath=hub"


def _run(code: str, reuse: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REUSE_WORKER"}
    if reuse:
        env["SPARK_REUSE_WORKER"] = "1"  # what Spark sets for the Python workers it reuses
    prelude = f"import gc\nCONNECTION = {CONNECTION!r}\n"
    done = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_settle_freezes_a_reused_worker_once() -> None:
    out = _run(
        """
        from pyspark_eventhubs import worker_gc
        first = worker_gc.settle()
        frozen = gc.get_freeze_count()
        later = [[i] for i in range(1000)]  # objects made after the freeze stay collectable
        print(first, frozen > 0, worker_gc.settle(), gc.get_freeze_count() == frozen)
        """,
        reuse=True,
    )
    assert out == "True True False True"


def test_settle_leaves_a_process_that_spark_does_not_reuse_alone() -> None:
    out = _run(
        """
        from pyspark_eventhubs import worker_gc
        print(worker_gc.settle(), gc.get_freeze_count())
        """,
        reuse=False,
    )
    assert out == "False 0"


@pytest.mark.parametrize(
    "where",
    [
        # the write planner and the commit runner build the stream writer
        "EventHubsStreamWriter(options, StructType([StructField('body', BinaryType())]))",
        # a write task that sent nothing (the producer is built, no link is opened)
        "_write_rows(options, SinkColumns('body', None, None, None), iter([]))",
        # a read task with no range
        "list(read_task(options, EventHubsReadTask(())))",
    ],
)
def test_the_connector_settles_the_workers_it_runs_in(where: str) -> None:
    out = _run(
        f"""
        from pyspark.sql.types import BinaryType, StructField, StructType
        from pyspark_eventhubs.options import parse_options
        from pyspark_eventhubs.read_tasks import EventHubsReadTask, read_task
        from pyspark_eventhubs.writer import EventHubsStreamWriter, SinkColumns, _write_rows
        options = parse_options({{"eventhubs.connectionString": CONNECTION}})
        before = gc.get_freeze_count()
        {where}
        print(before, gc.get_freeze_count() > 0)
        """,
        reuse=True,
    )
    assert out == "0 True"
