"""SparkJobOperator called directly (no scheduler): a backfill run needs a data interval and an
application that can read one again; a real spark-submit whose failure no retry can cure fails the
task at once, any other failure leaves it to Airflow's retries; a pipeline of one's own runs like a
built-in job. Whole DAG runs are in tests/dags."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from airflow.sdk import AssetAlias
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from airflow.sdk.execution_time.context import OutletEventAccessors

from hubflow.lake_assets import alias_name
from hubflow.status import JobState, StatusFolder
from hubflow_jobs.pipeline import QUARANTINE_REASON
from hubflow_plugins.operators.spark_job import SparkJobOperator
from tests.dags.helpers import landing_job, write_registry
from tests.jobs.helpers import write_json_landing_file

pytestmark = pytest.mark.integration


def _backfill(start: datetime | None, end: datetime | None) -> dict[str, Any]:
    dag_run = SimpleNamespace(run_type="backfill", run_id="backfill__1", triggering_user_name=None)
    return {
        "dag_run": dag_run,
        "run_id": "backfill__1",
        "data_interval_start": start,
        "data_interval_end": end,
        "ti": _ti("backfill__1"),
        "outlet_events": OutletEventAccessors(),
    }


def test_a_backfill_run_needs_a_data_interval(registry: Path) -> None:
    operator = SparkJobOperator(task_id="run_job", job_name="orders")
    noon = datetime(2026, 11, 22, 12, tzinfo=UTC)
    with pytest.raises(AirflowFailException, match="backfill run without a data interval"):
        operator.execute(_backfill(None, None))
    with pytest.raises(AirflowFailException, match="backfill run without a data interval"):
        operator.execute(_backfill(noon, noon))


def test_an_interval_only_task_refuses_a_run_without_an_hour_or_interval(registry: Path) -> None:
    """The ``__backfill`` and ``__follow`` DAGs' task: a plain trigger (no partition key, no backfill)
    fails, saying how to run it, instead of running the job."""
    manual = {
        **_backfill(None, None),
        "dag_run": SimpleNamespace(run_type="manual", run_id="m", partition_key=None),
    }
    with pytest.raises(
        AirflowFailException,
        match="replaces an hour of job orders and nothing else: run it through a backfill",
    ):
        SparkJobOperator(task_id="run_job", job_name="orders", interval_only=True).execute(manual)


def test_a_backfill_of_an_application_that_cannot_reread_its_input_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = landing_job(tmp_path, "replay", application="lake_to_eventhubs")
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(write_registry(tmp_path, [entry])))
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    start, end = datetime(2026, 11, 22, 10, tzinfo=UTC), datetime(2026, 11, 22, 11, tzinfo=UTC)
    with pytest.raises(
        AirflowFailException,
        match=(
            "backfill runs are supported for bronze_to_silver, eventhubs_to_lake, files_to_lake jobs and "
            "pipelines, not lake_to_eventhubs"
        ),
    ):
        SparkJobOperator(task_id="run_job", job_name="replay").execute(_backfill(start, end))


def _local_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **source: Any) -> dict[str, Any]:
    """Register the files_to_lake job ``orders`` (``source`` keys changed) on local Spark."""
    entry = landing_job(tmp_path, "orders", **({"source": source} if source else {}))
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(write_registry(tmp_path, [entry])))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
    return entry


def _ti(run_id: str, try_number: int = 1) -> SimpleNamespace:
    return SimpleNamespace(
        dag_id="job__available_now", run_id=run_id, task_id="run_job", try_number=try_number
    )


def _scheduled_run(
    run_id: str = "scheduled__1", try_number: int = 1, started: datetime | None = None
) -> dict[str, Any]:
    started = started or datetime.now(UTC)
    return {
        "dag_run": SimpleNamespace(run_type="scheduled", run_id=run_id, start_date=started),
        "run_id": run_id,
        "ti": _ti(run_id, try_number),
        "outlet_events": OutletEventAccessors(),  # Airflow's own accessor: what the task announced
    }


def _announced(context: dict[str, Any], job: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """The asset events a run added through the job's alias: table name -> (uri, extra)."""
    events = context["outlet_events"][AssetAlias(alias_name(job))].asset_alias_events
    return {event.dest_asset_key.name: (event.dest_asset_key.uri, event.extra) for event in events}


def test_a_job_whose_config_or_hold_refuses_every_run_fails_at_once_saying_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real spark-submits that end before Spark starts: exit 2 (config), exit 4 (on-call hold)."""
    entry = _local_job(tmp_path, monkeypatch)
    config = Path(entry["config"])
    good = config.read_text(encoding="utf-8")
    broken = {**yaml.safe_load(good), "trigger": {"availableNow": True, "processingTime": "1 minute"}}
    config.write_text(yaml.safe_dump(broken), encoding="utf-8")
    operator = SparkJobOperator(task_id="run_job", job_name="orders")
    with pytest.raises(
        AirflowFailException, match=r"the run of job orders refused its config \(exit 2\)"
    ) as e:
        operator.execute(_scheduled_run())
    assert "Error code is: 2" in str(e.value.__cause__), "the provider's error, with the log tail, is kept"

    config.write_text(good, encoding="utf-8")
    StatusFolder(str(tmp_path / "orders" / "status" / "orders")).place_hold("disk full", by="test")
    with pytest.raises(AirflowFailException, match=r"job orders is held by on-call \(exit 4\).*action start"):
        operator.execute(_scheduled_run())


def test_a_scheduled_job_pages_on_call_when_its_last_try_fails_and_again_when_a_run_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry's ``alerts:`` for a scheduled job, to a real SMTP server on loopback: a failed try
    Airflow will retry says nothing, the last try's failure one ALERT, a later run that succeeds one
    RESOLVED (issue #27 item 3). Real spark-submits: a schema Spark refuses (exit 1), then a good one."""
    from tests.plugins.notifications.receivers import SmtpServer

    with SmtpServer() as smtp:
        monkeypatch.setenv("AIRFLOW_CONN_ALERTS_SMTP", smtp.connection)
        alerts = {
            "notifiers": [{"smtp": {"to": ["oncall@example.com"], "smtp_conn_id": "alerts_smtp"}}],
            "status_page_url": "https://airflow.example.com/hubflow/",
        }
        entry = landing_job(tmp_path, "orders", source={"schema": "id BIGNUMBER, name STRING"}, alerts=alerts)
        monkeypatch.setenv("HUBFLOW_REGISTRY", str(write_registry(tmp_path, [entry])))
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
        ids = write_json_landing_file(tmp_path / "orders" / "landing", "a.json", 1, good=2, bad=0)

        def attempt(try_number: int) -> dict[str, Any]:
            run = _scheduled_run("scheduled__1", try_number=try_number)
            run["ti"].max_tries = 1  # retries: 1
            return SparkJobOperator(task_id="run_job", job_name="orders").execute(run)

        with pytest.raises(AirflowException, match="Error code is: 1"):
            attempt(1)
        assert smtp.inbox.mails == [], "Airflow retries this try: nothing to page yet"
        with pytest.raises(AirflowException, match="Error code is: 1"):
            attempt(2)
        assert [m["subject"] for m in smtp.inbox.mails] == ["[hubflow] ALERT orders: batch failed"]
        assert "Error code is: 1" in smtp.inbox.mails[0]["body"]

        config = Path(entry["config"])
        config.write_text(config.read_text(encoding="utf-8").replace("BIGNUMBER", "BIGINT"), encoding="utf-8")
        assert attempt(1)["input_rows"] == len(ids)
        assert [m["subject"] for m in smtp.inbox.mails][1:] == ["[hubflow] RESOLVED orders: batch failed"]


def test_a_run_that_fails_while_running_is_left_to_airflows_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real run whose query cannot start: exit 1, an ordinary AirflowException, so Airflow retries it;
    the task log tells the run's own reason, read from its status.json."""
    _local_job(tmp_path, monkeypatch, schema="id BIGNUMBER, name STRING")
    write_json_landing_file(tmp_path / "orders" / "landing", "a.json", 1, good=1, bad=0)
    operator = SparkJobOperator(task_id="run_job", job_name="orders")
    told: list[str] = []
    monkeypatch.setattr(operator.log, "error", lambda message, *args: told.append(message % args))
    with pytest.raises(AirflowException, match="Error code is: 1") as e:
        operator.execute(_scheduled_run())
    assert not isinstance(e.value, AirflowFailException)
    verdicts = [text for text in told if text.startswith("the run of job orders failed (exit 1): ")]
    assert verdicts, told
    assert "job orders failed to start its query: " in verdicts[0] and "BIGNUMBER" in verdicts[0], verdicts


def test_a_scheduled_run_announces_the_batches_its_parquet_outputs_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """files_to_lake with its parquet output and quarantine (Spark's file sink): a real spark-submit
    commits batch 0 to each, and the run announces both as assets with that batch id (their
    ``_spark_metadata`` names); a run that found nothing new announces nothing; a retry announces
    what its failed try committed."""
    _local_job(tmp_path, monkeypatch)
    write_json_landing_file(tmp_path / "orders" / "landing", "a.json", 1, good=3, bad=1)

    run = _scheduled_run("scheduled__1")
    assert SparkJobOperator(task_id="run_job", job_name="orders").execute(run)["input_rows"] == 4
    first = {"job": "orders", "from_version": 0, "to_version": 0, "run": "scheduled", "versions": [0]}
    assert _announced(run, "orders") == {
        "orders": (f"file://{tmp_path / 'orders' / 'lake' / 'orders'}", first),
        "quarantine": (f"file://{tmp_path / 'orders' / 'quarantine'}", first),
    }
    idle = _scheduled_run("scheduled__2")
    assert SparkJobOperator(task_id="run_job", job_name="orders").execute(idle)["input_rows"] == 0
    assert _announced(idle, "orders") == {}
    # A try that committed batch 1 and then failed (no asset event kept) is announced by the retry
    # of the same run with its own batch 2: the failed try's batches are those written since the
    # DAG run started.
    started = datetime.now(UTC)
    write_json_landing_file(tmp_path / "orders" / "landing", "b.json", 100, good=2, bad=0)
    failed_try = _scheduled_run("scheduled__3", try_number=1, started=started)
    assert SparkJobOperator(task_id="run_job", job_name="orders").execute(failed_try)["input_rows"] == 2
    write_json_landing_file(tmp_path / "orders" / "landing", "c.json", 200, good=1, bad=1)
    retry = _scheduled_run("scheduled__3", try_number=2, started=started)
    assert SparkJobOperator(task_id="run_job", job_name="orders").execute(retry)["input_rows"] == 2
    both_tries = {"job": "orders", "from_version": 1, "to_version": 2, "run": "scheduled", "versions": [1, 2]}
    assert _announced(retry, "orders") == {
        "orders": (f"file://{tmp_path / 'orders' / 'lake' / 'orders'}", both_tries),
        "quarantine": (f"file://{tmp_path / 'orders' / 'quarantine'}", both_tries),
    }


PIPELINE_MODULE = '''
from pyspark.sql import functions as F

from hubflow_jobs.pipeline import QUARANTINE_REASON, RAW_RECORD


def transform(orders, params):
    """Orders named in upper case; a record that does not parse or has no id goes to quarantine."""
    bad = F.when(F.col(RAW_RECORD).isNotNull(), F.lit("not json")).when(F.col("id").isNull(), F.lit("no id"))
    return orders.select("id", F.upper("name").alias("name"), RAW_RECORD, bad.alias(QUARANTINE_REASON))
'''


def test_a_pipeline_of_ones_own_runs_through_spark_submit_and_quarantines_its_bad_rows(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A registry entry ``application: module:function`` with its module in $HUBFLOW_PIPELINES_DIR: a
    real spark-submit of jobs/pipeline.py; every good record once in the output, the bad ones in
    the quarantine."""
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "shout.py").write_text(PIPELINE_MODULE, encoding="utf-8")
    landing = tmp_path / "landing"
    landing.mkdir()
    config = {
        "name": "shout",
        "trigger": {"availableNow": True},
        "checkpoint_root": str(tmp_path / "checkpoints"),
        "status_root": str(tmp_path / "status"),
        "spark_conf": {"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": False},
        "sources": {
            "orders": {
                "kind": "files",
                "path": str(landing),
                "format": "json",
                "schema": "id BIGINT, name STRING",
            }
        },
        "sinks": {
            "upper": {
                "kind": "delta",
                "output_path": str(tmp_path / "upper"),
                "quarantine_path": str(tmp_path / "bad"),
            }
        },
    }
    (tmp_path / "shout.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    entry = {
        "name": "shout",
        "application": "shout:transform",
        "config": str(tmp_path / "shout.yaml"),
        "mode": "scheduled",
        "schedule": "@hourly",
    }
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(write_registry(tmp_path, [entry])))
    monkeypatch.setenv("HUBFLOW_PIPELINES_DIR", str(tmp_path / "pipelines"))
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
    ids = write_json_landing_file(landing, "a.json", 1, good=3, bad=2)

    run = _scheduled_run()
    result = SparkJobOperator(task_id="run_job", job_name="shout").execute(run)

    assert result["state"] == JobState.STOPPED and result["input_rows"] == 5
    # Each table it committed to is announced as an Asset (name: the table's, URI: its location)
    # with the versions the run added; a run that found nothing new announces nothing.
    extra = {"job": "shout", "from_version": 0, "to_version": 0, "run": "scheduled", "versions": [0]}
    assert _announced(run, "shout") == {
        "upper": (f"file://{tmp_path / 'upper'}", extra),
        "bad": (f"file://{tmp_path / 'bad'}", extra),
    }
    # A try that committed and then failed (the worker lost after its spark-submit: Airflow keeps
    # no asset event of a failed try) is announced by the retry of the same run, with the retry's
    # own commits; a run that found nothing new announces nothing.
    ids |= write_json_landing_file(landing, "b.json", 100, good=2, bad=0)
    started = datetime.now(UTC)
    failed_try = _scheduled_run("scheduled__2", try_number=1, started=started)
    assert SparkJobOperator(task_id="run_job", job_name="shout").execute(failed_try)["input_rows"] == 2
    ids |= write_json_landing_file(landing, "c.json", 200, good=1, bad=0)
    retry = _scheduled_run("scheduled__2", try_number=2, started=started)
    assert SparkJobOperator(task_id="run_job", job_name="shout").execute(retry)["input_rows"] == 1
    both_tries = {"job": "shout", "from_version": 1, "to_version": 2, "run": "scheduled", "versions": [1, 2]}
    assert _announced(retry, "shout") == {
        "upper": (f"file://{tmp_path / 'upper'}", both_tries),
        "bad": (f"file://{tmp_path / 'bad'}", both_tries),
    }
    idle = _scheduled_run("scheduled__3")
    assert SparkJobOperator(task_id="run_job", job_name="shout").execute(idle)["input_rows"] == 0
    assert _announced(idle, "shout") == {}
    rows = spark.read.format("delta").load(str(tmp_path / "upper")).collect()
    assert sorted((row["id"], row["name"]) for row in rows) == [(i, f"N{i}") for i in sorted(ids)]
    bad = spark.read.format("delta").load(str(tmp_path / "bad")).collect()
    assert sorted(row[QUARANTINE_REASON] for row in bad) == ["no id", "not json"]

    # A backfill run of it goes to jobs/backfill.py with the pipeline's reference, which refuses a
    # files source without interval_folder before Spark starts: exit 2, failed at once (no retry),
    # the reason in the log.
    start, end = datetime(2026, 11, 22, 10, tzinfo=UTC), datetime(2026, 11, 22, 11, tzinfo=UTC)
    with pytest.raises(AirflowFailException, match=r"refused its config or backfill window \(exit 2\)") as e:
        SparkJobOperator(task_id="run_job", job_name="shout").execute(_backfill(start, end))
    cause = str(e.value.__cause__)
    assert "jobs/backfill.py --config" in cause and "--application shout:transform" in cause
    assert "job shout: sources.orders.interval_folder is not set" in cause
