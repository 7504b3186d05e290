"""``hubflow new pipeline``: what it writes passes ``hubflow check``, ruff and its own unit test; what
it refuses, it refuses with nothing written.

The installed executable writes into a temporary pipelines folder and registry (``--dir``,
``--registry``). The generated unit tests start one local Spark (a single pytest run for them all).
The ``eventhubs_kafka`` scaffold, its emulator line uncommented as it says, reads the emulator's
events through Spark's Kafka source.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli.helpers import hubflow, output

REPO_ROOT = Path(__file__).resolve().parents[2]
RUFF = Path(sys.executable).parent / "ruff"
REGISTRY_HEAD = "# the team's registry: keep this comment\njobs: []\n"


def _new(pipelines: Path, registry: Path, name: str, *extra: str) -> subprocess.CompletedProcess:
    return hubflow("new", "pipeline", name, "--dir", pipelines, "--registry", registry, *extra)


@pytest.mark.integration
def test_a_new_pipeline_of_each_kind_passes_check_ruff_and_its_unit_test(tmp_path: Path) -> None:
    pipelines, registry = tmp_path / "pipelines", tmp_path / "registry.yaml"
    registry.write_text(REGISTRY_HEAD, encoding="utf-8")

    printed = {}
    kinds = (
        ("orders", "files"),
        ("clicks", "eventhubs"),
        ("alerts", "eventhubs_kafka"),
        ("silver", "delta"),
        ("copied", "parquet"),
    )
    for name, kind in kinds:
        result = _new(pipelines, registry, name, "--source-kind", kind)
        assert result.returncode == 0, output(result)
        printed[name] = result.stdout
    result = _new(pipelines, registry, "fwd", "--trigger", "realtime")  # eventhubs_kafka to a hub
    assert result.returncode == 0, output(result)
    printed["fwd"] = result.stdout

    for written in ("orders.py", "configs/orders.yaml", "tests/test_orders.py", "tests/conftest.py"):
        assert f"wrote {pipelines / written}" in printed["orders"]
    assert f"appended the job's entry to {registry}" in printed["orders"]
    assert f"HUBFLOW_PIPELINES_DIR={pipelines} hubflow check --registry {registry}" in printed["orders"]
    assert f"HUBFLOW_PIPELINES_DIR={pipelines} hubflow run orders --once --registry" in printed["orders"]
    text = registry.read_text(encoding="utf-8")
    assert text.startswith("# the team's registry: keep this comment\njobs:\n")
    entries = {job["name"]: job for job in yaml.safe_load(text)["jobs"]}
    assert list(entries) == ["orders", "clicks", "alerts", "silver", "copied", "fwd"]
    assert entries["fwd"]["mode"] == "streaming" and "schedule" not in entries["fwd"]
    real_time = yaml.safe_load((pipelines / "configs" / "fwd.yaml").read_text(encoding="utf-8"))
    assert real_time["trigger"] == {"realTime": "30 seconds"}
    assert [real_time["sources"]["events"]["kind"], real_time["sinks"]["output"]["kind"]] == [
        "eventhubs_kafka",
        "eventhubs_kafka",
    ]
    assert (
        f"HUBFLOW_PIPELINES_DIR={pipelines} hubflow run fwd --registry {registry}  # runs until stopped"
        in (printed["fwd"])
    )
    assert entries["orders"] == {
        "name": "orders",
        "application": "orders:transform",
        "config": str(pipelines / "configs" / "orders.yaml"),
        "mode": "scheduled",
        "schedule": "@hourly",
    }
    config = yaml.safe_load((pipelines / "configs" / "orders.yaml").read_text(encoding="utf-8"))
    assert config["trigger"] == {"availableNow": True}
    assert config["sources"]["landing"]["path"] == str(tmp_path / "data" / "landing" / "orders")
    assert config["sinks"]["output"]["kind"] == "delta"

    checked = hubflow("check", "--registry", registry, pipelines=pipelines)
    assert checked.returncode == 0, output(checked)
    assert "ok    orders  (orders:transform)" in checked.stdout
    # Only this machine's facts are missing for the others: the hub's variable, the upstream table.
    assert "warn  clicks" in checked.stdout and "CLICKS_EVENTHUBS_CONNECTION is not set" in checked.stdout
    assert "warn  alerts" in checked.stdout and "ALERTS_EVENTHUBS_CONNECTION is not set" in checked.stdout
    assert "# against the emulator: uncomment kafka_bootstrap_servers" in printed["alerts"]
    assert "warn  silver" in checked.stdout and "is not a Delta table" in checked.stdout
    assert "warn  copied" in checked.stdout and "upstream does not exist" in checked.stdout
    assert "warn  fwd" in checked.stdout and "FWD_OUTPUT_EVENTHUBS_CONNECTION is not set" in checked.stdout

    config_file = str(REPO_ROOT / "pyproject.toml")
    for command in (["check"], ["format", "--check", "--diff"]):
        ruff = subprocess.run(
            [str(RUFF), *command, "--config", config_file, str(pipelines)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert ruff.returncode == 0, f"ruff {command[0]}:\n{ruff.stdout}{ruff.stderr}"

    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(pipelines / "tests")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    assert "6 passed" in tests.stdout


def test_refusals_write_nothing(tmp_path: Path) -> None:
    pipelines, registry = tmp_path / "pipelines", tmp_path / "registry.yaml"
    registry.write_text(REGISTRY_HEAD, encoding="utf-8")
    assert _new(pipelines, registry, "orders").returncode == 0
    after_first = registry.read_text(encoding="utf-8")
    (pipelines / "orders.py").write_text("# edited by hand\n", encoding="utf-8")

    refused = {
        "Orders-2": "must match ^[a-z][a-z0-9_]*$",
        "class": "is a Python keyword",
        "json": "is the name of a module Python imports already",
        "orders": f"job registry {registry} has a job named 'orders' already",
    }
    for name, message in refused.items():
        result = _new(pipelines, registry, name)
        assert result.returncode == 2, output(result)
        assert message in result.stdout, output(result)
    files = _new(pipelines, registry, "fast", "--trigger", "realtime", "--source-kind", "files")
    said = "--trigger realtime reads --source-kind eventhubs_kafka only (Spark's real-time mode runs"
    assert files.returncode == 2 and said in files.stdout and "not files" in files.stdout, output(files)
    other = tmp_path / "other.yaml"
    exists = _new(pipelines, other, "orders")
    assert exists.returncode == 2, output(exists)
    assert f"{pipelines / 'orders.py'}" in exists.stdout and "pass --force" in exists.stdout

    assert registry.read_text(encoding="utf-8") == after_first
    assert not other.exists()
    assert (pipelines / "orders.py").read_text(encoding="utf-8") == "# edited by hand\n"
    assert sorted(p.name for p in pipelines.glob("*.py")) == ["orders.py"]

    forced = _new(pipelines, other, "orders", "--force")
    assert forced.returncode == 0, output(forced)
    assert "def transform(landing" in (pipelines / "orders.py").read_text(encoding="utf-8")
    assert yaml.safe_load(other.read_text(encoding="utf-8"))["jobs"][0]["name"] == "orders"


def test_a_source_kind_not_offered_is_refused_by_argparse_listing_the_choices(tmp_path: Path) -> None:
    result = _new(tmp_path / "pipelines", tmp_path / "registry.yaml", "orders", "--source-kind", "kafka")
    assert result.returncode == 2, output(result)
    assert "argument --source-kind: invalid choice: 'kafka'" in result.stderr, output(result)
    assert "'files', 'eventhubs', 'eventhubs_kafka', 'delta', 'parquet'" in result.stderr, output(result)
    assert not (tmp_path / "pipelines").exists()


@pytest.mark.integration
def test_a_new_eventhubs_kafka_pipeline_reads_the_emulators_events_through_kafka(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scaffold as written but for its emulator line (uncommented, the emulator's address):
    ``hubflow check --local`` is content, and a run lands every AMQP-sent event once."""
    from azure.eventhub import EventData, EventHubProducerClient

    from eventhubs_emulator import Emulator, EmulatorConfig
    from hubflow.repository import PIPELINES_DIR_ENV
    from hubflow.status.exit_codes import EXIT_OK
    from hubflow_cli.scaffold import EMULATOR_BOOTSTRAP_LINE, connection_variable
    from tests.jobs.pipelines_support import run_on_session

    pipelines, registry = tmp_path / "pipelines", tmp_path / "registry.yaml"
    created = _new(pipelines, registry, "alerts", "--source-kind", "eventhubs_kafka")
    assert created.returncode == 0, output(created)
    config_path = pipelines / "configs" / "alerts.yaml"
    text = config_path.read_text(encoding="utf-8")
    assert EMULATOR_BOOTSTRAP_LINE in text
    assert yaml.safe_load(text)["sources"]["events"]["kind"] == "eventhubs_kafka"

    with Emulator(EmulatorConfig.many_hubs({"alerts": 2}, kafka_port=0)) as emulator:
        uncommented = EMULATOR_BOOTSTRAP_LINE.replace("# ", "").replace(
            "127.0.0.1:9093", emulator.kafka_bootstrap
        )
        config_path.write_text(text.replace(EMULATOR_BOOTSTRAP_LINE, uncommented), encoding="utf-8")
        connection = emulator.connection_string("alerts")
        monkeypatch.setenv(connection_variable("alerts"), connection)
        checked = hubflow("check", "--local", "--registry", registry, pipelines=pipelines)
        assert checked.returncode == 0, output(checked)
        assert "ok    alerts  (alerts:transform)" in checked.stdout

        producer = EventHubProducerClient.from_connection_string(connection)
        with producer:
            for partition in ("0", "1"):
                batch = producer.create_batch(partition_id=partition)
                for n in range(int(partition), 30, 2):
                    batch.add(EventData(f"alert-{n}"))
                producer.send_batch(batch)

        monkeypatch.setenv(PIPELINES_DIR_ENV, str(pipelines))
        monkeypatch.setattr(sys, "path", list(sys.path))
        try:
            assert run_on_session(spark, "alerts:transform", config_path)[0] == EXIT_OK
        finally:
            sys.modules.pop("alerts", None)

    output_path = yaml.safe_load(text)["sinks"]["output"]["output_path"]
    rows = spark.read.format("delta").load(output_path).collect()
    assert sorted(row["body"] for row in rows) == sorted(f"alert-{n}" for n in range(30))  # each once
    assert {row["partition"] for row in rows} == {"0", "1"}


def _write_delta(spark: Any, rows: list[tuple], path: str) -> None:
    """The upstream Delta table: one commit of the rows."""
    from hubflow_cli.scaffold import UPSTREAM_SCHEMA

    spark.createDataFrame(rows, UPSTREAM_SCHEMA).write.format("delta").save(path)


def _write_parquet(spark: Any, rows: list[tuple], path: str) -> None:
    """The upstream parquet table as a streaming query writes it (Spark's file sink, its
    ``_spark_metadata`` log): two batches, the second one straddling the hour."""
    from hubflow_cli.scaffold import UPSTREAM_SCHEMA
    from hubflow_jobs.lake.file_sink import ExactlyOnceFileSink

    sink = ExactlyOnceFileSink(spark, path)
    for batch, part in enumerate((rows[:80], rows[80:])):
        sink.add_batch(batch, spark.createDataFrame(part, UPSTREAM_SCHEMA).repartition(2))
    assert (Path(path) / "_spark_metadata" / "1").is_file()


def _table_scaffold_runs_and_backfills_an_hour(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, write_upstream: Any
) -> None:
    """The table scaffold ``kind`` as written, on an upstream table ``write_upstream`` writes with its
    ``interval_column``: ``hubflow check`` is content, a run lands every row once, and the backfill
    of an hour replaces that hour's rows (every one once, the other hour untouched) as
    ``jobs/backfill.py`` would."""
    from datetime import UTC, datetime, timedelta

    from hubflow.repository import PIPELINES_DIR_ENV
    from hubflow.status.exit_codes import EXIT_OK
    from hubflow_cli.scaffold import INTERVAL_COLUMN
    from hubflow_jobs.pipeline.backfill import backfill_pipeline, backfill_problem
    from hubflow_jobs.pipeline.job import load_pipeline
    from tests.jobs.pipelines_support import run_on_session

    pipelines, registry = tmp_path / "pipelines", tmp_path / "registry.yaml"
    created = _new(pipelines, registry, "readings", "--source-kind", kind)
    assert created.returncode == 0, output(created)
    config_path = pipelines / "configs" / "readings.yaml"
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    assert config["sources"]["upstream"]["kind"] == kind
    assert config["sources"]["upstream"]["interval_column"] == INTERVAL_COLUMN
    t0 = datetime(2026, 11, 25, 10, tzinfo=UTC)
    rows = [(n, t0 + timedelta(minutes=n), f"r{n}") for n in range(120)]  # 0-59 at 10:xx, 60-119 at 11:xx
    write_upstream(spark, rows, config["sources"]["upstream"]["path"])

    checked = hubflow("check", "--registry", registry, pipelines=pipelines)
    assert checked.returncode == 0, output(checked)
    assert "ok    readings  (readings:transform)" in checked.stdout

    monkeypatch.setenv(PIPELINES_DIR_ENV, str(pipelines))
    monkeypatch.setattr(sys, "path", list(sys.path))
    output_path = config["sinks"]["output"]["output_path"]
    try:
        assert run_on_session(spark, "readings:transform", config_path)[0] == EXIT_OK
        before = sorted(tuple(r) for r in spark.read.format("delta").load(output_path).collect())
        assert [r[0] for r in before] == list(range(120)), "every row once"
        loaded, binding = load_pipeline("readings:transform", str(config_path))
        assert backfill_problem(loaded, binding) is None
        counts = backfill_pipeline(spark, loaded, binding, t0 + timedelta(hours=1), t0 + timedelta(hours=2))
    finally:
        sys.modules.pop("readings", None)
    assert counts["read"] == counts["written"] == 60
    after = sorted(tuple(r) for r in spark.read.format("delta").load(output_path).collect())
    assert after == before, "the hour's rows replaced by the same rows, each once"
    history = spark.sql(f"DESCRIBE HISTORY delta.`{output_path}` LIMIT 1").first()
    assert history["operation"] == "WRITE", "a replaceWhere of the hour"
    assert INTERVAL_COLUMN in history["operationParameters"]["predicate"]


@pytest.mark.integration
def test_a_new_delta_pipeline_passes_check_runs_and_backfills_an_hour(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _table_scaffold_runs_and_backfills_an_hour(spark, tmp_path, monkeypatch, "delta", _write_delta)


@pytest.mark.integration
def test_a_new_parquet_pipeline_passes_check_runs_and_backfills_an_hour(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a parquet table a streaming query wrote, ``_spark_metadata`` and all."""
    _table_scaffold_runs_and_backfills_an_hour(spark, tmp_path, monkeypatch, "parquet", _write_parquet)
