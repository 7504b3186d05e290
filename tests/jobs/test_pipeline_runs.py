"""Pipelines of users' own functions run on real Spark: files and Event Hubs sources, a quarantine,
two sinks, checkpoint resume, kill -9 of a spark-submit driver, and a bad reference refused before
Spark starts. Every data check is by identity: each record or event exactly once."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest

from hubflow.repository import PIPELINES_DIR_ENV
from hubflow.status.exit_codes import EXIT_CONFIG_ERROR, EXIT_FAILED, EXIT_OK
from hubflow_jobs.pipeline.job import load_pipeline, ship_module
from hubflow_jobs.pipeline.streams import start_pipeline
from hubflow_jobs.runtime.runner import run_job
from hubflow_jobs.runtime.stop import StopRequest
from tests.support.lake import spark_rows
from tests.support.spark_cluster import spark_env

from . import helpers
from .helpers import (
    JOBS_DIR,
    EmulatedHub,
    log_ids,
    read_status,
    write_json_landing_file,
)
from .pipelines_support import (
    NUMBER_EVENTS,
    check_events_once,
    kill_after_first_commit,
    numbered_events,
    query_id,
    recorded_batches,
)
from .pipelines_support import pipeline_config as _config
from .pipelines_support import run_on_session as _run
from .pipelines_support import write_module as _module

pytestmark = pytest.mark.integration

ENV_VAR = "HUBFLOW_TEST_PIPELINE_CONNECTION"
PIPELINE_SCRIPT = JOBS_DIR / "pipeline.py"

#: Marks broken records for the quarantine: text that is not JSON, or a record without its id.
QUARANTINE_ORDERS = """
from pyspark.sql import functions as F

from hubflow_jobs.pipeline import QUARANTINE_REASON, RAW_RECORD


def orders(orders):
    reason = F.when(F.col(RAW_RECORD).isNotNull(), F.lit("not json")).when(
        F.col("id").isNull(), F.lit("no id")
    )
    return orders.withColumn(QUARANTINE_REASON, reason)
"""

#: Keeps the events whose number is a multiple of ``params.modulus`` (bodies are ``event-<n>``).
KEEP_EVENTS = """
from pydantic import BaseModel
from pyspark.sql import functions as F


class Params(BaseModel):
    modulus: int


def keep(telemetry, params: Params):
    number = F.substring_index(F.col("body").cast("string"), "-", -1).cast("long")
    return telemetry.withColumn("number", number).where(number % params.modulus == 0)
"""

#: Two sinks from one function: every good record, and the ones whose id is a multiple of 5.
SPLIT_ORDERS = """
from pyspark.sql import functions as F

from hubflow_jobs.pipeline import RAW_RECORD


def split(orders, params):
    good = orders.where(F.col(RAW_RECORD).isNull()).drop(RAW_RECORD)
    return {"everything": good, "fives": good.where(F.col("id") % params["every"] == 0).select("id", "name")}
"""

#: The escape hatch: the function starts its own queries. The first through hubflow's writer of a
#: declared sink; the second its own foreachBatch writer (counts per batch into a JSON file per batch
#: id, idempotent), on a helper session, with the second sink's checkpoint.
OWN_QUERIES = """
import json
from pathlib import Path


def start(context, params):
    orders = context.read("orders")
    first = context.write(orders.select("id", "name").where(orders.id.isNotNull()), "lake")

    def count(batch, batch_id):
        out = Path(params["counts"]) / f"{batch_id}.json"
        out.write_text(json.dumps({"rows": batch.count()}))

    helper = context.helper_session()
    counts = (
        context.read("orders", session=helper)
        .writeStream.foreachBatch(count)
        .option("checkpointLocation", context.checkpoint("counts"))
        .trigger(**context.trigger)
        .start()
    )
    return [first, counts]
"""


def _local(uri: str) -> str:
    return unquote(urlparse(uri).path)


def _archived(archive: Path) -> set[str]:
    """Original paths of the archived files (Spark archives to archive_dir + the original path)."""
    return {"/" + str(p.relative_to(archive)) for p in archive.rglob("*") if p.is_file()}


def _committed_files(checkpoint: Path) -> set[str]:
    """Landing files of the batches the query committed, from the file source's log."""
    committed = set(log_ids(checkpoint / "commits"))
    files = set()
    for log_file in sorted((checkpoint / "sources" / "0").glob("[0-9]*")):
        for line in log_file.read_text(encoding="utf-8").splitlines()[1:]:
            entry = json.loads(line)
            if entry["batchId"] in committed:
                files.add(_local(entry["path"]))
    return files


def test_files_with_a_quarantine_land_each_record_once_and_resume_from_the_checkpoint(
    spark: Any, tmp_path: Path, pipelines: Path
) -> None:
    _module(pipelines, "runs_quarantine", QUARANTINE_ORDERS)
    landing, archive = tmp_path / "landing", tmp_path / "archive"
    landing.mkdir()
    output, quarantine = tmp_path / "lake" / "orders", tmp_path / "lake" / "orders_quarantine"
    config = _config(
        tmp_path,
        "orders_quarantine",
        sources={
            "orders": {
                "kind": "files",
                "path": str(landing),
                "format": "json",
                "schema": "id BIGINT, name STRING",
                "max_files_per_trigger": 1,
                "archive_dir": str(archive),
            }
        },
        sinks={"lake": {"kind": "delta", "output_path": str(output), "quarantine_path": str(quarantine)}},
    )
    expected = write_json_landing_file(landing, "a.json", 1, good=3, bad=2)
    expected |= write_json_landing_file(landing, "b.json", 10, good=4, bad=1)

    code, reason = _run(spark, "runs_quarantine:orders", config)

    assert code == EXIT_OK, reason
    assert reason == "job orders_quarantine finished: no more input (trigger availableNow)"
    lake = spark.read.format("delta").load(str(output))
    assert lake.columns == ["id", "name", "_raw_record", "_source_file"], "the reason column is dropped"
    rows = lake.collect()
    assert sorted(r["id"] for r in rows) == sorted(expected), "every good record exactly once"
    assert all(r["name"] == f"n{r['id']}" and r["_raw_record"] is None for r in rows)
    assert {Path(_local(r["_source_file"])).name for r in rows} == {"a.json", "b.json"}
    bad = spark.read.format("delta").load(str(quarantine)).collect()
    assert sorted((r["_quarantine_reason"], r["_raw_record"], r["name"]) for r in bad) == [
        ("no id", None, "no id"),
        ("not json", "not json a.json 0", None),
        ("not json", "not json b.json 0", None),
    ]
    checkpoint = tmp_path / "checkpoints" / "orders_quarantine"
    assert log_ids(checkpoint / "commits") == [0, 1], "one file per batch"
    query = query_id(checkpoint)
    for table in (output, quarantine):
        assert recorded_batches(table, query) == [0, 1], f"one commit per batch in {table.name}"
    status = read_status(tmp_path, "orders_quarantine")
    assert status["state"] == "stopped" and status["query_id"] == query
    # Spark archives a batch's files when it plans the next batch: b.json waits for the next run.
    assert _archived(archive) == {str(landing / "a.json")}

    more = write_json_landing_file(landing, "c.json", 100, good=2, bad=1)
    code, reason = _run(spark, "runs_quarantine:orders", config)

    assert code == EXIT_OK, reason
    ids = [r[0] for r in spark_rows(spark, output, {"id": "value"})]
    assert sorted(ids) == sorted(expected | more), "the second run added only the new file"
    assert len(spark.read.format("delta").load(str(quarantine)).collect()) == 4
    assert log_ids(checkpoint / "commits") == [0, 1, 2]
    assert recorded_batches(output, query) == [0, 1, 2]
    assert _archived(archive) == {str(landing / "a.json"), str(landing / "b.json")}
    assert _archived(archive) <= _committed_files(checkpoint)


def test_an_event_hubs_source_filtered_lands_each_kept_event_once(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path, pipelines: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _module(pipelines, "runs_keep", KEEP_EVENTS)
    monkeypatch.setenv(ENV_VAR, eventhub.connection_string)
    output = tmp_path / "lake" / "kept"
    config = _config(
        tmp_path,
        "kept_events",
        sources={
            "telemetry": {
                "kind": "eventhubs",
                "connection_string_env": ENV_VAR,
                "max_events_per_trigger": 150,
            }
        },
        sinks={"kept": {"kind": "delta", "output_path": str(output)}},
        params={"modulus": 3},
    )
    sent = eventhub.send_numbered(0, 400)
    kept = {body for body in sent if int(body.split(b"-")[1]) % 3 == 0}

    code, reason = _run(spark, "runs_keep:keep", config)

    assert code == EXIT_OK, reason
    check_events_once(numbered_events(spark, output), kept, eventhub.partitions)
    checkpoint = tmp_path / "checkpoints" / "kept_events"
    batches = log_ids(checkpoint / "commits")
    assert len(batches) >= 3, "max_events_per_trigger split the events into batches"
    assert recorded_batches(output, query_id(checkpoint)) == batches
    progress = read_status(tmp_path, "kept_events")["last_progress"]
    assert progress["sources"][0]["end_offset"] == eventhub.expected_offsets(), "every event was read"


def test_two_sinks_from_one_function_each_hold_their_rows_once_with_their_own_checkpoints(
    spark: Any, tmp_path: Path, pipelines: Path
) -> None:
    _module(pipelines, "runs_split", SPLIT_ORDERS)
    landing = tmp_path / "landing"
    landing.mkdir()
    everything, fives = tmp_path / "lake" / "everything", tmp_path / "lake" / "fives"
    config = _config(
        tmp_path,
        "orders_split",
        sources={
            "orders": {
                "kind": "files",
                "path": str(landing),
                "format": "json",
                "schema": "id BIGINT, name STRING",
                "max_files_per_trigger": 1,
            }
        },
        sinks={
            "everything": {"kind": "delta", "output_path": str(everything)},
            "fives": {"kind": "parquet", "output_path": str(fives)},
        },
        params={"every": 5},
    )
    expected = write_json_landing_file(landing, "a.json", 1, good=12, bad=1)
    expected |= write_json_landing_file(landing, "b.json", 20, good=11, bad=0)

    code, reason = _run(spark, "runs_split:split", config)

    assert code == EXIT_OK, reason
    assert not spark.streams.active, "the helper query stopped with the job"

    def check(expected: set[int]) -> None:
        ids = [r[0] for r in spark_rows(spark, everything, {"id": "value"})]
        assert sorted(ids) == sorted(expected), "every good record once in the first sink"
        five_ids = [r["id"] for r in spark.read.parquet(str(fives)).collect()]
        assert sorted(five_ids) == sorted(i for i in expected if i % 5 == 0), "and its share in the second"

    check(expected)
    checkpoint = tmp_path / "checkpoints" / "orders_split"
    helper = checkpoint / "sinks" / "fives"
    assert log_ids(checkpoint / "commits") == [0, 1] and log_ids(helper / "commits") == [0, 1]
    assert log_ids(helper / "offsets") == [0, 1] and (helper / "sources" / "0").is_dir()
    assert not (checkpoint / "sinks" / "everything").exists(), "the first sink's query is the job's"
    main_query = query_id(checkpoint)
    assert query_id(helper) != main_query
    assert recorded_batches(everything, main_query) == [0, 1]
    assert (fives / "_spark_metadata").is_dir() and not (fives / "_delta_log").exists()
    assert read_status(tmp_path, "orders_split")["query_id"] == main_query, (
        "status.json reports the job's query"
    )

    more = write_json_landing_file(landing, "c.json", 50, good=6, bad=0)
    code, reason = _run(spark, "runs_split:split", config)

    assert code == EXIT_OK, reason
    check(expected | more)
    assert log_ids(checkpoint / "commits") == [0, 1, 2] and log_ids(helper / "commits") == [0, 1, 2]


def test_a_function_that_takes_context_starts_its_own_queries_and_they_are_supervised(
    spark: Any, tmp_path: Path, pipelines: Path
) -> None:
    _module(pipelines, "runs_own", OWN_QUERIES)
    landing, lake, counts = tmp_path / "landing", tmp_path / "lake" / "own", tmp_path / "counts"
    landing.mkdir()
    counts.mkdir()
    files = {"kind": "files", "path": str(landing), "format": "json", "schema": "id BIGINT, name STRING"}
    config = _config(
        tmp_path,
        "own_queries",
        sources={"orders": {**files, "max_files_per_trigger": 1}},
        sinks={
            "lake": {"kind": "delta", "output_path": str(lake)},
            "counts": {"kind": "parquet", "output_path": str(counts / "unused")},
        },
        params={"counts": str(counts)},
    )
    expected = write_json_landing_file(landing, "a.json", 1, good=4, bad=1)
    expected |= write_json_landing_file(landing, "b.json", 10, good=3, bad=0)

    code, reason = _run(spark, "runs_own:start", config)

    assert code == EXIT_OK, reason
    assert not spark.streams.active, "both queries ended with the job"
    ids = [r[0] for r in spark_rows(spark, lake, {"id": "value"})]
    assert sorted(ids) == sorted(expected), "every good record once through hubflow's writer"
    per_batch = {int(f.stem): json.loads(f.read_text())["rows"] for f in counts.glob("*.json")}
    assert per_batch == {0: 5, 1: 3}, "the function's own query read each file once, one per batch"
    checkpoint = tmp_path / "checkpoints" / "own_queries"
    assert log_ids(checkpoint / "commits") == [0, 1] and log_ids(
        checkpoint / "sinks" / "counts" / "commits"
    ) == [0, 1]
    assert read_status(tmp_path, "own_queries")["query_id"] == query_id(checkpoint), (
        "status follows the first"
    )


def test_a_quarantine_column_without_a_quarantine_path_fails_the_start_with_what_to_do(
    spark: Any, tmp_path: Path, pipelines: Path
) -> None:
    _module(pipelines, "runs_no_quarantine", QUARANTINE_ORDERS)
    landing = tmp_path / "landing"
    landing.mkdir()
    write_json_landing_file(landing, "a.json", 1, good=2, bad=1)
    output = tmp_path / "lake" / "orders"
    config = _config(
        tmp_path,
        "orders_unquarantined",
        sources={"orders": {"kind": "files", "path": str(landing), "format": "json", "schema": "id BIGINT"}},
        sinks={"lake": {"kind": "delta", "output_path": str(output)}},
    )

    code, reason = _run(spark, "runs_no_quarantine:orders", config)

    assert code == EXIT_FAILED
    assert reason == (
        "job orders_unquarantined failed to start its query: PipelineError: pipeline "
        "'runs_no_quarantine:orders': sink 'lake' gets a _quarantine_reason column but has no "
        "quarantine_path; add sinks.lake.quarantine_path or drop the column"
    )
    assert not output.exists() and not (tmp_path / "checkpoints").exists(), "nothing was started"


@pytest.mark.timeout(600)
def test_a_killed_spark_submit_driver_resumes_with_each_event_once(
    spark: Any,
    eventhub: EmulatedHub,
    tmp_path: Path,
    pipelines: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kill -9 of ``spark-submit jobs/pipeline.py`` after its first Delta commit; the rerun does the rest."""
    _module(pipelines, "runs_numbered", NUMBER_EVENTS)
    output = tmp_path / "lake" / "numbered"
    sections: dict[str, Any] = {
        "sources": {
            "telemetry": {
                "kind": "eventhubs",
                "connection_string_env": ENV_VAR,
                "max_events_per_trigger": 100,
            }
        },
        "sinks": {"numbered": {"kind": "delta", "output_path": str(output)}},
    }
    sent = eventhub.send_numbered(0, 500)
    streaming = _config(tmp_path, "numbered_events", trigger={"processingTime": "1 second"}, **sections)
    env = {ENV_VAR: eventhub.connection_string, PIPELINES_DIR_ENV: str(pipelines)}
    checkpoint = tmp_path / "checkpoints" / "numbered_events"
    log = tmp_path / "killed.log"

    driver = helpers.spark_submit(
        streaming,
        log,
        script=PIPELINE_SCRIPT,
        extra_env=env,
        script_args=["--pipeline", "runs_numbered:numbered"],
    )
    committed = kill_after_first_commit(driver, checkpoint, log)
    text = log.read_text(encoding="utf-8")
    module = pipelines / "runs_numbered.py"
    assert f"job numbered_events runs pipeline runs_numbered:numbered ({module}): sources telemetry" in text
    assert f"Added file {module}" in text, "the module was shipped to the executors, for its UDF"

    monkeypatch.setenv(ENV_VAR, eventhub.connection_string)
    again = _config(tmp_path, "numbered_events", trigger={"availableNow": True}, **sections)
    config, binding = load_pipeline("runs_numbered:numbered", str(again))
    ship_module(spark, binding)  # as jobs/pipeline.py does: the UDF's module reaches the executors
    code, reason = run_job(spark, config, functools.partial(start_pipeline, binding=binding), StopRequest())

    assert code == EXIT_OK, reason
    check_events_once(numbered_events(spark, output), sent, eventhub.partitions)
    batches = log_ids(checkpoint / "commits")
    assert batches == list(range(len(batches))) and len(batches) > len(committed)
    recorded = recorded_batches(output, query_id(checkpoint))
    assert recorded == batches, "each batch committed to the table once, none twice"


@pytest.mark.parametrize(
    ("reference", "params", "expected"),
    [
        (
            "runs_absent:transform",
            {"modulus": 3},
            "pipeline 'runs_absent:transform': no module 'runs_absent' in {folder}",
        ),
        (
            "runs_refused:kep",
            {"modulus": 3},
            "module runs_refused ({folder}/runs_refused.py) has no function 'kep'",
        ),
        (
            "runs_refused:keep",
            {"modulus": "three"},
            "params do not fit Params: params.modulus: Input should be",
        ),
        (
            "runs_ddl_udf:numbered",
            {},
            "({folder}/runs_ddl_udf.py, line 6): PySparkRuntimeError: [SESSION_OR_CONTEXT_NOT_EXISTS]",
        ),
    ],
    ids=["missing-module", "missing-function", "params", "module-needs-spark"],
)
def test_a_bad_pipeline_exits_2_before_spark_starts(
    tmp_path: Path, pipelines: Path, reference: str, params: dict[str, Any], expected: str
) -> None:
    """The reference, binding and params are checked before the session: no JVM, nothing on disk.

    So a module that needs Spark when it is imported (a udf typed by a DDL string) is refused too,
    with what to write instead.
    """
    _module(pipelines, "runs_refused", KEEP_EVENTS)
    _module(pipelines, "runs_ddl_udf", NUMBER_EVENTS.replace("LongType()", '"long"'))
    (tmp_path / "landing").mkdir()
    config = _config(
        tmp_path,
        "refused",
        sources={
            "telemetry": {
                "kind": "files",
                "path": str(tmp_path / "landing"),
                "format": "json",
                "schema": "id INT",
            }
        },
        sinks={"lake": {"kind": "delta", "output_path": str(tmp_path / "lake")}},
        params=params,
    )

    done = subprocess.run(
        [sys.executable, str(PIPELINE_SCRIPT), "--pipeline", reference, "--config", str(config)],
        capture_output=True,
        text=True,
        env=spark_env({"PYTHONPATH": str(JOBS_DIR), PIPELINES_DIR_ENV: str(pipelines)}),
        timeout=120,
    )

    assert done.returncode == EXIT_CONFIG_ERROR, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "ERROR hubflow_jobs: " in last and expected.format(folder=pipelines) in last
    if "ddl_udf" in reference:
        assert "give a module-level udf its return type as a DataType (LongType(), not 'long')" in last
    assert "Running Spark version" not in done.stderr and "INFO SparkContext" not in done.stderr, "no JVM"
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "status").exists(), "nothing started"
