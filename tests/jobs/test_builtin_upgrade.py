"""Built-in jobs upgraded mid-stream: the checkpoints and tables that eventhubs_to_lake,
bronze_to_silver and lake_to_eventhubs wrote before they were rebuilt as pipelines
(tests/jobs/fixtures/*_v0, made by hubflow 03a0736) resume exactly with today's jobs under the config
an upgrading team still has (the old keys): what arrived since lands (or is published) once, nothing
is read again, the tables keep their columns. The same config written with the pipeline's keys
validates to the identical job (``test_old_and_new_keys_are_the_same_job``), so the resumes hold for
it as well without a Spark run each."""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.lake import delta_version, recorded_batch, spark_rows

from .fixtures.files_to_lake_v0.make_fixture import config as files_config
from .fixtures.lake_to_eventhubs_v0.make_fixture import config as publisher_config
from .helpers import (
    EVENTHUBS_TO_LAKE,
    JOBS_DIR,
    EmulatedHub,
    eventhubs_config,
    receive_all,
    spark_submit,
    write_config,
)
from .pipelines_support import wait_for_listener_events
from .test_delta_source import append_bronze, silver_config

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parent / "fixtures" / "eventhubs_to_lake_v0"
ENV_VAR = "HUBFLOW_TEST_EVENTHUBS_CONNECTION"
NAME = "telemetry_bronze"
#: What the fixture's job read: events 0..39, ten on each of the 4 partitions.
FIXTURE_EVENTS = 40


def _new_keys(config: dict[str, Any]) -> dict[str, Any]:
    """The same config written with the pipeline's keys."""
    config = dict(config)
    source, sink = config.pop("source"), config.pop("sink")
    config["sources"] = {"events": {"kind": "eventhubs", **source}}
    config["sinks"] = {
        "bronze": {
            "kind": sink["format"],
            "output_path": sink["output_path"],
            "partition_by": ["ingest_date"],
        }
    }
    return config


def _bronze_config(base: Path) -> dict[str, Any]:
    """eventhubs_to_lake's config as the fixture's job had it (old keys, a Delta sink)."""
    return eventhubs_config(base, None, ENV_VAR, name=NAME, sink={"format": "delta"})  # type: ignore[arg-type]


def _query_id(checkpoint: Path) -> str:
    return json.loads((checkpoint / "metadata").read_text())["id"]


def test_a_checkpoint_of_the_job_before_pipelines_resumes_exactly(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path
) -> None:
    # The hub as the fixture's job saw it (a fresh emulator numbers each partition from 0), then more.
    before = eventhub.send_numbered(0, FIXTURE_EVENTS)
    after = eventhub.send_numbered(FIXTURE_EVENTS, 20)
    for folder in ("checkpoints", "lake"):
        shutil.copytree(FIXTURE / folder, tmp_path / folder)
    checkpoint, table = tmp_path / "checkpoints" / NAME, tmp_path / "lake" / "bronze"
    assert delta_version(table) == 0
    old = spark_rows(spark, table, {"partition": "value", "sequenceNumber": "value", "body": "value"})
    assert {row[2] for row in old} == before, "the fixture holds the first 40 events"

    config = _bronze_config(tmp_path)
    job = spark_submit(
        write_config(tmp_path / "job.yaml", config),
        tmp_path / "driver.log",
        script=EVENTHUBS_TO_LAKE,
        extra_env={ENV_VAR: eventhub.connection_string},
    )
    log = tmp_path / "driver.log"
    assert job.wait(600) == 0, log.read_text()[-4000:]

    rows = spark_rows(spark, table, {"partition": "value", "sequenceNumber": "value", "body": "value"})
    identities = [(row[0], row[1]) for row in rows]
    assert len(identities) == len(set(identities)), "every event once, by identity"
    assert {row[2] for row in rows} == before | after
    assert set(old) <= set(rows), "the fixture's rows are untouched"
    assert delta_version(table) == 1, "one new batch, in one commit"
    assert recorded_batch(table, _query_id(checkpoint)) == 1, "written with the old query's transaction"
    deprecated = (
        "source: and sink: are the keys of the built-in eventhubs_to_lake before it became a pipeline"
    )
    assert deprecated in log.read_text(), "an old config is read with the deprecation warning"


SILVER_FIXTURE = Path(__file__).parent / "fixtures" / "bronze_to_silver_v0"


def _silver_new_keys(config: dict[str, Any]) -> dict[str, Any]:
    """bronze_to_silver's config written with the pipeline's keys (the built-in's sink defaults)."""
    config = dict(config)
    source, parse, sink = config.pop("source"), config.pop("parse"), config.pop("sink")
    config["sources"] = {"bronze": {"kind": "delta", **source}}
    config["params"] = parse
    config["sinks"] = {"silver": {"kind": "delta", **sink}}
    return config


def test_a_silver_checkpoint_of_the_job_before_pipelines_resumes_exactly(spark: Any, tmp_path: Path) -> None:
    for folder in ("bronze", "checkpoints", "silver", "quarantine"):
        shutil.copytree(SILVER_FIXTURE / folder, tmp_path / folder)
    silver, quarantine = tmp_path / "silver", tmp_path / "quarantine"
    columns = {"sequenceNumber": "value"}
    old_silver, old_quarantine = spark_rows(spark, silver, columns), spark_rows(spark, quarantine, columns)
    assert (len(old_silver), old_quarantine) == (29, [(29,)]), "the fixture read 30 events, one bad"
    schemas = {table: spark.read.format("delta").load(str(table)).schema for table in (silver, quarantine)}
    more = append_bronze(spark, tmp_path / "bronze", 100, files=1, bad=1)

    config = silver_config(tmp_path)
    log = tmp_path / "driver.log"
    job = spark_submit(
        write_config(tmp_path / "silver.yaml", config), log, script=JOBS_DIR / "bronze_to_silver.py"
    )
    assert job.wait(600) == 0, log.read_text()[-4000:]

    assert [r[0] for r in spark_rows(spark, silver, columns)] == sorted({r[0] for r in old_silver} | more)
    assert spark_rows(spark, quarantine, columns) == [(29,), (109,)], "every event once, in one table"
    for table, schema in schemas.items():
        assert spark.read.format("delta").load(str(table)).schema == schema, f"{table.name} keeps its columns"
        assert delta_version(table) == 2, "one new batch, one commit each"
        query_id = _query_id(tmp_path / "checkpoints" / "telemetry_silver")
        assert recorded_batch(table, query_id) == 2, "written with the old query's transaction"
    status = json.loads((tmp_path / "status" / "telemetry_silver" / "status.json").read_text())
    assert status["counts"] == {"read": 10, "written": 9, "quarantined": 1}


PUBLISH_FIXTURE = Path(__file__).parent / "fixtures" / "lake_to_eventhubs_v0"


def _publisher_new_keys(config: dict[str, Any]) -> dict[str, Any]:
    """lake_to_eventhubs's config written with the pipeline's keys."""
    config = dict(config)
    source, sink, message = config.pop("source"), config.pop("sink"), config.pop("message")
    source = {key: value for key, value in source.items() if key != "format"}
    config["sources"] = {"table": {"kind": "delta", **source}}
    config["sinks"] = {"hub": {"kind": "eventhubs", **sink}}
    config["params"] = message
    return config


def test_a_publisher_checkpoint_of_the_job_before_pipelines_publishes_only_what_is_new(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path
) -> None:
    from .fixtures.lake_to_eventhubs_v0.make_fixture import ENV_VAR as PUBLISH_ENV
    from .fixtures.lake_to_eventhubs_v0.make_fixture import write_orders

    for folder in ("orders", "checkpoints"):
        shutil.copytree(PUBLISH_FIXTURE / folder, tmp_path / folder)
    write_orders(spark, tmp_path / "orders", 10, 5)  # the fixture's job published orders 0..9
    config = publisher_config(tmp_path)
    log = tmp_path / "driver.log"
    job = spark_submit(
        write_config(tmp_path / "job.yaml", config),
        log,
        script=JOBS_DIR / "lake_to_eventhubs.py",
        extra_env={PUBLISH_ENV: eventhub.connection_string},
    )
    assert job.wait(600) == 0, log.read_text()[-4000:]
    published = [
        json.loads(event.body_as_str()) for _partition, event in receive_all(eventhub.connection_string)
    ]
    assert sorted(body["order_id"] for body in published) == list(range(10, 15)), "only the new orders, once"


FILES_FIXTURE = Path(__file__).parent / "fixtures" / "files_to_lake_v0"


def _files_new_keys(config: dict[str, Any]) -> dict[str, Any]:
    """files_to_lake's config written with the pipeline's keys (the built-in's sink defaults)."""
    config = dict(config)
    source, sink = dict(config.pop("source")), dict(config.pop("sink"))
    config["params"] = {"required_columns": source.pop("required_columns")}
    config["sources"] = {"landing": {"kind": "files", **source}}
    config["sinks"] = {"lake": {"kind": sink.pop("format"), **sink}}
    return config


def test_a_files_checkpoint_of_the_job_before_pipelines_resumes_exactly(spark: Any, tmp_path: Path) -> None:
    """The fixture's job read a.json and b.json (archived) and c.json (committed, still in landing, as
    Spark archives a batch's files when it plans the next one). Resumed in place by today's job under
    the old keys: d.json lands once, c.json is archived now, nothing is read again, both tables keep
    their columns and get one commit with the old query's transaction."""
    from .fixtures.files_to_lake_v0 import make_fixture as v0
    from .helpers import files_to_lake_config, run_files_to_lake, write_json_landing_file

    where = v0.WHERE
    shutil.rmtree(where, ignore_errors=True)
    try:
        for folder in v0.FOLDERS:
            shutil.copytree(FILES_FIXTURE / folder, where / folder)
        output, quarantine = where / "lake" / "orders", where / "quarantine"
        ids, raws = {"id": "value"}, {"raw_record": "value", "batch_id": "value"}
        old_ids = {r[0] for r in spark_rows(spark, output, ids)}
        assert old_ids == {*range(1, 6), *range(100, 103), *range(200, 204)}, "what the fixture's job read"
        assert len(spark_rows(spark, quarantine, raws)) == 5
        schemas = {
            table: spark.read.format("delta").load(str(table)).schema for table in (output, quarantine)
        }
        more = write_json_landing_file(where / "landing", "d.json", 300, good=2, bad=1)

        with pytest.warns(FutureWarning, match="files_to_lake before it became a pipeline"):
            config = files_to_lake_config(write_config(where / "job.yaml", v0.config(where)))
        code, reason = run_files_to_lake(spark, config)
        assert code == 0, reason

        rows = [r[0] for r in spark_rows(spark, output, ids)]
        assert sorted(rows) == sorted(old_ids | more), "every record exactly once"
        quarantined = spark_rows(spark, quarantine, raws)
        assert len(quarantined) == 6 and {r[1] for r in quarantined} == {0, 2}, "d.json's bad one, batch 2"
        checkpoint = where / "checkpoints" / "files_to_lake"
        for table, schema in schemas.items():
            assert spark.read.format("delta").load(str(table)).schema == schema, (
                f"{table.name} keeps its columns"
            )
            assert delta_version(table) == 2, "one new batch, one commit each"
            assert recorded_batch(table, _query_id(checkpoint)) == 2, (
                "written with the old query's transaction"
            )
        archived = {p.name for p in (where / "archive").rglob("*.json")}
        assert archived == {"a.json", "b.json", "c.json"}, "c.json archived once its batch's successor ran"
        assert [p.name for p in (where / "landing").iterdir()] == ["d.json"]
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.parametrize(
    ("builtin", "old_config", "new_keys"),
    [
        ("eventhubs_to_lake", _bronze_config, _new_keys),
        ("bronze_to_silver", silver_config, _silver_new_keys),
        ("lake_to_eventhubs", publisher_config, _publisher_new_keys),
        ("files_to_lake", files_config, _files_new_keys),
    ],
)
def test_old_and_new_keys_are_the_same_job(
    tmp_path: Path,
    builtin: str,
    old_config: Callable[[Path], dict[str, Any]],
    new_keys: Callable[[dict[str, Any]], dict[str, Any]],
) -> None:
    """A built-in's old config and the same config in the pipeline's keys validate to one job (same
    sources, sinks, checkpoints, params): what the resumes above prove for the old keys holds for the
    new. Only the old keys are read with the deprecation warning."""
    from hubflow.config import load_config
    from hubflow_jobs.builtins.legacy_config import LegacyConfigWarning

    model = _config_model(builtin)
    old = old_config(tmp_path)
    # As the job reads its file, minus the checks of the machine it runs on (tables, secret variable).
    with pytest.warns(LegacyConfigWarning, match=builtin):
        upgraded = load_config(write_config(tmp_path / "old.yaml", old), model, check_environment=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LegacyConfigWarning)
        new = write_config(tmp_path / "new.yaml", new_keys(old))
        rewritten = load_config(new, model, check_environment=False)
    assert upgraded.model_dump() == rewritten.model_dump()
    assert upgraded.sinks and upgraded.sources, "both hold the job's sources and sinks"


def _config_model(builtin: str) -> Any:
    """The built-in's config model (each built-in's module names its own)."""
    from hubflow_jobs.builtins import bronze_to_silver, eventhubs_to_lake, files_to_lake, lake_to_eventhubs

    return {
        "files_to_lake": files_to_lake.FilesToLakeConfig,
        "eventhubs_to_lake": eventhubs_to_lake.EventHubsToLakeConfig,
        "bronze_to_silver": bronze_to_silver.BronzeToSilverConfig,
        "lake_to_eventhubs": lake_to_eventhubs.LakeToEventHubsConfig,
    }[builtin]


AGGREGATE_FIXTURE = Path(__file__).parent / "fixtures" / "eventhubs_aggregate_v0"


def _aggregate_new_keys(config: dict[str, Any]) -> dict[str, Any]:
    """eventhubs_aggregate's config written with the pipeline's keys: its two sinks, the quarantine's
    query keeping the checkpoint the job before pipelines left in the quarantine table."""
    config = dict(config)
    source, aggregation, sink = config.pop("source"), config.pop("aggregation"), config.pop("sink")
    config["sources"] = {"events": {"kind": "eventhubs", **source}}
    config["params"] = aggregation
    quarantine = sink["quarantine_path"]
    config["sinks"] = {
        "windows": {
            "kind": sink["format"],
            "output_path": sink["output_path"],
            "partition_by": ["window_date"],
        },
        "quarantine": {
            "kind": sink["format"],
            "output_path": quarantine,
            "partition_by": ["ingest_date"],
            "checkpoint": f"{quarantine}/_checkpoint",
        },
    }
    return config


def test_aggregate_old_and_new_keys_are_the_same_job(tmp_path: Path) -> None:
    """eventhubs_aggregate's old config (one ``sink:`` for two tables) and its pipeline keys validate
    to one job, whose quarantine query resumes from the checkpoint the old job kept in the table."""
    from hubflow.config import load_config
    from hubflow_jobs.builtins.eventhubs_aggregate import EventHubsAggregateConfig
    from hubflow_jobs.builtins.legacy_config import LegacyConfigWarning

    from .fixtures.eventhubs_aggregate_v0.make_fixture import config as aggregate_config

    old = aggregate_config(tmp_path)
    with pytest.warns(LegacyConfigWarning, match="eventhubs_aggregate"):
        upgraded = load_config(
            write_config(tmp_path / "old.yaml", old), EventHubsAggregateConfig, check_environment=False
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error", LegacyConfigWarning)
        new = write_config(tmp_path / "new.yaml", _aggregate_new_keys(old))
        rewritten = load_config(new, EventHubsAggregateConfig, check_environment=False)
    assert upgraded.model_dump() == rewritten.model_dump()
    output, quarantine = old["sink"]["output_path"], old["sink"]["quarantine_path"]
    assert upgraded.delta_table_writers() == [
        (output, upgraded.checkpoint_location),
        (quarantine, f"{quarantine}/_checkpoint"),
    ]
    assert upgraded.checkpoint_location == f"{tmp_path}/checkpoints/device_minutes"


def test_an_aggregate_checkpoint_of_the_job_before_pipelines_resumes_exactly(
    spark: Any, eventhub: EmulatedHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fixture's job wrote windows of minutes 0 and 1, held d (4:10) and c (5:00) open in its
    RocksDB state at watermark 4:30, and quarantined three events. Resumed by today's job: the late a
    is dropped and counted, d's window sums both runs' events, e (10:00) closes 4 and 5, every
    window is written once and every bad event quarantined once; nothing is read again. Run in-process
    on the shared session (as tests/jobs/test_eventhubs_aggregate.py runs the job), not spark-submit."""
    from hubflow.config import load_config
    from hubflow_jobs.builtins.eventhubs_aggregate import EventHubsAggregateConfig
    from hubflow_jobs.builtins.legacy_config import LegacyConfigWarning
    from hubflow_jobs.pipeline.job import start_function
    from hubflow_jobs.pipeline.progress import STATE_STORE_PROVIDER_CONF
    from hubflow_jobs.runtime.runner import run_job
    from hubflow_jobs.runtime.stop import StopRequest

    from .fixtures.eventhubs_aggregate_v0 import make_fixture as v0

    eventhub.send(v0.spread(v0.fixture_bodies()))  # the hub as the fixture's job saw it, then more
    new_bad = [b"{broken", v0.reading(None, 270, 1.0)]
    eventhub.send(
        v0.spread(
            [v0.reading("a", 50, 1000.0), v0.reading("d", 260, 8.0), v0.reading("e", 600, 1.0), *new_bad]
        )
    )
    for folder in v0.FOLDERS:
        shutil.copytree(AGGREGATE_FIXTURE / folder, tmp_path / folder)
    output, quarantine = tmp_path / "lake" / v0.NAME, tmp_path / "quarantine" / v0.NAME
    window_columns = {"window_start": "value", "device": "value", "event_count": "value", "temp_sum": "value"}
    old_windows = spark_rows(spark, output, window_columns)
    assert len(old_windows) == 4, "the fixture wrote the windows of minutes 0 and 1"
    schemas = {table: spark.read.format("delta").load(str(table)).schema for table in (output, quarantine)}

    monkeypatch.setenv(v0.ENV_VAR, eventhub.connection_string)
    with pytest.warns(
        LegacyConfigWarning, match="the built-in eventhubs_aggregate before it became a pipeline"
    ):
        config = load_config(
            write_config(tmp_path / "job.yaml", v0.config(tmp_path)), EventHubsAggregateConfig
        )
    provider = spark.conf.get(STATE_STORE_PROVIDER_CONF, None)
    try:
        code, reason = run_job(spark, config, start_function("eventhubs_aggregate"), StopRequest())
    finally:  # the job sets the state store provider on the shared session
        if provider is None:
            spark.conf.unset(STATE_STORE_PROVIDER_CONF)
        else:
            spark.conf.set(STATE_STORE_PROVIDER_CONF, provider)
    assert code == 0, reason

    rows = spark_rows(spark, output, window_columns)
    assert len({(row[0], row[1]) for row in rows}) == len(rows), "every window once, by identity"
    first = min(row[0] for row in rows)  # the window of minute 0, 2026-01-01T00:00 UTC
    minutes = sorted((int((row[0] - first).total_seconds() // 60), *row[1:]) for row in rows)
    assert minutes == [
        (0, "a", 2, 3.0),
        (0, "b", 1, 10.0),
        (1, "a", 1, 4.0),
        (1, "b", 1, 20.0),
        (4, "d", 2, 15.0),
        (5, "c", 1, 100.0),
    ], "the late a is not counted; d sums the state of the old run and the new event"
    assert set(old_windows) <= set(rows), "the fixture's windows are untouched"
    bad = spark_rows(
        spark, quarantine, {"partition": "value", "sequenceNumber": "value", "raw_body": "value"}
    )
    assert len({(row[0], row[1]) for row in bad}) == len(bad), "every bad event once, by identity"
    assert sorted(row[2].encode() for row in bad) == sorted([*v0.BAD, *new_bad])
    for table, schema in schemas.items():
        assert spark.read.format("delta").load(str(table)).schema == schema, f"{table.name} keeps its columns"
    assert (quarantine / "_checkpoint" / "commits" / "1").exists(), (
        "the quarantine resumed its old checkpoint"
    )
    assert not (tmp_path / "checkpoints" / v0.NAME / "sinks").exists()
    # counts, late_events and watermark come from listeners on Spark's bus (the quarantine's from a
    # helper session's query), which may still be delivering the last batches' progress.
    wait_for_listener_events(spark)
    status = json.loads((tmp_path / "status" / v0.NAME / "status.json").read_text())
    assert status["counts"] == {"read": 5, "aggregated": 3, "quarantined": 2}, "only the new events read"
    assert status["late_events"]["run_total"] == 1
    assert status["watermark"] == "2026-01-01T00:09:30.000Z"
