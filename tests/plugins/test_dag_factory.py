"""The DAG factory's DAGs, built in-process from a registry (no scheduler, no database): which DAGs,
which tasks in which order, on which schedule; the end-to-end runs are in tests/dags."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from airflow.sdk import CronDataIntervalTimetable, DeltaDataIntervalTimetable

from hubflow.registry import Registry, RegistryError, load_registry
from hubflow_plugins.dag_factory import build_dags, interval_timetable
from tests.dags.helpers import landing_job, write_registry


@pytest.fixture
def dags(tmp_path: Path) -> dict:
    jobs = [
        landing_job(tmp_path, "clicks", streaming=True, supervise_every="2 minutes", tags=["web"]),
        landing_job(tmp_path, "orders", archive=True, archive_retention="30 days", schedule="15 minutes"),
        landing_job(tmp_path, "returns", schedule="@daily"),
        {
            "name": "replay",
            "application": "lake_to_eventhubs",
            "config": str(tmp_path / "replay.yaml"),  # read when a task runs, never at parse time
            "mode": "scheduled",
            "schedule": "0 6 * * *",
        },
    ]
    return build_dags(load_registry(write_registry(tmp_path, jobs)))


def _edges(dag) -> set[tuple[str, str]]:
    return {(task.task_id, down) for task in dag.tasks for down in task.downstream_task_ids}


def test_each_job_gets_the_dag_of_its_mode_and_the_registry_gets_oncall_and_cleanup(dags: dict) -> None:
    assert sorted(dags) == [
        "clicks__backfill",
        "clicks__oncall",
        "clicks__supervisor",
        "hubflow__cleanup",
        "orders__available_now",
        "orders__backfill",
        "replay__available_now",
        "returns__available_now",
        "returns__backfill",
    ]
    supervisor = dags["clicks__supervisor"]
    assert _edges(supervisor) == {("ensure_running", "check_health")}
    assert supervisor.schedule == timedelta(minutes=2), "every supervise_every"
    assert supervisor.max_active_runs == 1 and not supervisor.catchup
    assert {"hubflow", "streaming", "web"} <= set(supervisor.tags)
    health = supervisor.get_task("check_health")
    assert health.allow_idle and health.skip_when_held
    assert set(health.accept) == {"healthy", "batch-in-flight"}

    assert _edges(dags["orders__available_now"]) == {
        ("run_job", "check_health"),
        ("check_health", "archive_processed_files"),
    }
    assert _edges(dags["returns__available_now"]) == {("run_job", "check_health")}, "archive: false"


def test_supervisor_checks_wait_deferred_and_scheduled_checks_poke_unless_the_registry_says(
    tmp_path: Path,
) -> None:
    jobs = [
        landing_job(tmp_path, "clicks", streaming=True),
        landing_job(tmp_path, "views", streaming=True, health_check="poke"),
        landing_job(tmp_path, "orders"),
        landing_job(tmp_path, "returns", health_check="deferred"),
    ]
    dags = build_dags(load_registry(write_registry(tmp_path, jobs)))

    def deferrable(dag_id: str) -> bool:
        return dags[dag_id].get_task("check_health").deferrable

    assert deferrable("clicks__supervisor"), "a supervisor's check holds no worker slot by default"
    assert not deferrable("views__supervisor")
    assert not deferrable("orders__available_now"), "a scheduled run's check pokes by default"
    assert deferrable("returns__available_now")
    with pytest.raises(RegistryError, match="health_check"):
        load_registry(write_registry(tmp_path, [landing_job(tmp_path, "bad", health_check="sleep")]))


def test_scheduled_dags_have_data_intervals_for_backfill(dags: dict) -> None:
    every_15 = dags["orders__available_now"].timetable
    assert isinstance(every_15, DeltaDataIntervalTimetable) and every_15.delta == timedelta(minutes=15)
    daily = dags["returns__available_now"].timetable
    assert isinstance(daily, CronDataIntervalTimetable) and daily.expression == "0 0 * * *", "preset as cron"
    assert dags["replay__available_now"].timetable.expression == "0 6 * * *"
    assert interval_timetable("1 day").delta == timedelta(days=1)


def test_cleanup_covers_retention_and_delta_maintenance_per_job(dags: dict) -> None:
    cleanup = dags["hubflow__cleanup"]
    assert sorted(cleanup.task_ids) == [
        "archive_orders",  # the only job with archive_retention
        "checkpoint_backups_clicks",
        "checkpoint_backups_orders",
        "checkpoint_backups_replay",
        "checkpoint_backups_returns",
        "delta_maintenance_clicks",  # lake-writing applications; lake_to_eventhubs writes none
        "delta_maintenance_orders",
        "delta_maintenance_returns",
    ]
    assert cleanup.get_task("archive_orders").purge_older_than == "30 days"
    assert cleanup.schedule == timedelta(days=1)


def test_each_streaming_job_has_its_own_oncall_dag_one_run_at_a_time(dags: dict) -> None:
    """One on-call DAG per streaming job (Airflow's DAG permissions decide who acts on which job);
    scheduled jobs have none."""
    oncall = dags["clicks__oncall"]
    assert oncall.schedule is None and oncall.max_active_runs == 1 and not oncall.catchup
    assert "job" not in oncall.params, "the job is the DAG's, not a form field"
    assert {"hubflow", "oncall", "web"} <= set(oncall.tags)
    assert [dag_id for dag_id in dags if dag_id.endswith("__oncall")] == ["clicks__oncall"]
    assert oncall.params.get_param("action").schema["enum"] == ["restart", "stop", "start", "rewind"]
    assert oncall.params["dry_run"] is True, "the form defaults to a dry run"
    action = oncall.get_task("oncall_action")
    assert (action.job_name, action.action, action.dry_run) == (
        "clicks",
        "{{ params.action }}",
        "{{ params.dry_run }}",
    )
    assert oncall.params["force"] is False, "taking over another action's hold is asked for"
    assert (action.force, action.reason) == ("{{ params.force }}", "{{ params.reason or '' }}")


def test_an_empty_registry_builds_no_dags() -> None:
    assert build_dags(Registry(jobs=[])) == {}


def test_scheduled_runs_and_backfills_retry_as_the_registry_says_other_dags_never(tmp_path: Path) -> None:
    jobs = [
        landing_job(tmp_path, "clicks", streaming=True),
        landing_job(tmp_path, "orders", archive=True),  # the registry's defaults
        landing_job(tmp_path, "returns", retries=5, retry_delay="10 seconds", max_retry_delay="3 minutes"),
        landing_job(tmp_path, "refunds", retries=0),
    ]
    dags = build_dags(load_registry(write_registry(tmp_path, jobs)))

    def retries(dag_id: str) -> set[tuple]:
        return {
            (t.retries, t.retry_delay, t.retry_exponential_backoff, t.max_retry_delay)
            for t in dags[dag_id].tasks
        }

    # Every task of the availableNow DAG: run_job (backfill runs too), check_health, the archive.
    assert len(dags["orders__available_now"].tasks) == 3
    assert retries("orders__available_now") == {(2, timedelta(seconds=30), 2.0, timedelta(minutes=10))}
    assert retries("returns__available_now") == {(5, timedelta(seconds=10), 2.0, timedelta(minutes=3))}
    assert {t.retries for t in dags["refunds__available_now"].tasks} == {0}
    for dag_id in ("clicks__supervisor", "clicks__oncall", "hubflow__cleanup"):
        assert {t.retries for t in dags[dag_id].tasks} == {0}, dag_id


def test_a_job_scheduled_on_tables_runs_when_their_assets_change_and_every_job_announces_its_tables(
    tmp_path: Path,
) -> None:
    """``schedule: asset(...)``: Airflow's condition on the tables' assets by name (their URIs are
    known only when their jobs run); each job's tasks that commit declare the job's asset alias."""
    from airflow.sdk import AssetAlias, AssetAll, AssetAny
    from airflow.sdk.definitions.asset import AssetNameRef

    from hubflow.lake_assets import alias_name

    jobs = [
        landing_job(tmp_path, "clicks", streaming=True),
        landing_job(tmp_path, "silver", schedule="asset(clicks)"),
        landing_job(tmp_path, "both", schedule="asset(clicks & orders)"),
        landing_job(tmp_path, "either", schedule="asset( clicks | orders )"),
    ]
    dags = build_dags(load_registry(write_registry(tmp_path, jobs)))

    assert dags["silver__available_now"].schedule == AssetNameRef(name="clicks")
    assert dags["both__available_now"].schedule == AssetAll(
        AssetNameRef(name="clicks"), AssetNameRef(name="orders")
    )
    assert dags["either__available_now"].schedule == AssetAny(
        AssetNameRef(name="clicks"), AssetNameRef(name="orders")
    )
    run = dags["silver__available_now"].get_task("run_job")
    assert run.outlets == [AssetAlias(alias_name("silver"))]
    ensure = dags["clicks__supervisor"].get_task("ensure_running")
    assert ensure.outlets == ensure.inlets == [AssetAlias(alias_name("clicks"))], "reads what it announced"


def test_a_job_scheduled_on_events_runs_on_its_hubs_arrivals_watched_in_the_triggerer(tmp_path: Path) -> None:
    """``schedule: events(...)``: the DAG is scheduled on the asset ``<job>__events``, whose watcher is
    the arrival trigger over the job's hub (its connection, the poll interval; nothing read from the
    job's config or the connection at parse time)."""

    from hubflow_plugins.triggers.event_arrivals import EventHubsArrivalTrigger

    jobs = [
        {**landing_job(tmp_path, "arrivals", schedule="events(5 seconds)"), "eventhubs_conn_id": "hub_a"},
        {**landing_job(tmp_path, "slow", schedule="events"), "eventhubs_conn_id": "hub_b"},
    ]
    dags = build_dags(load_registry(write_registry(tmp_path, jobs)))

    asset = dags["arrivals__available_now"].schedule
    assert (asset.name, asset.uri) == ("arrivals__events", "hubflow-events://arrivals/")
    (watcher,) = asset.watchers
    assert watcher.name == "arrivals__events"
    assert isinstance(watcher.trigger, EventHubsArrivalTrigger)
    assert watcher.trigger.serialize() == (
        "hubflow_plugins.triggers.event_arrivals.EventHubsArrivalTrigger",
        {
            "job_name": "arrivals",
            "eventhubs_conn_id": "hub_a",
            "poll_interval": 5.0,
            "consumer_group": "$Default",
        },
    )
    slow = dags["slow__available_now"].schedule
    assert slow.watchers[0].trigger.poll_interval == 30.0, "events alone: every 30 seconds"


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("events()", "'' is not a duration"),
        ("events(0 seconds)", "must be longer than zero"),
        ("events(500 ms)", "write events(1 second) or longer"),
        ("events every 5 seconds", "write events"),
    ],
)
def test_a_schedule_on_events_that_cannot_be_read_is_refused_naming_the_job_and_the_fix(
    tmp_path: Path, schedule: str, message: str
) -> None:
    registry = write_registry(
        tmp_path, [{**landing_job(tmp_path, "arrivals", schedule=schedule), "eventhubs_conn_id": "hub"}]
    )
    with pytest.raises(RegistryError, match="jobs") as error:
        load_registry(registry)
    assert "schedule" in str(error.value) and message in str(error.value), str(error.value)


def test_a_job_scheduled_on_events_without_a_connection_is_refused_saying_which_key_to_set(
    tmp_path: Path,
) -> None:
    registry = write_registry(tmp_path, [landing_job(tmp_path, "arrivals", schedule="events")])
    with pytest.raises(RegistryError, match=r"set jobs\[arrivals\]\.eventhubs_conn_id"):
        load_registry(registry)


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("asset()", "'' is not a table's name"),
        ("asset(a & b | c)", "mixes & and |"),
        ("asset(a, b)", "'a, b' is not a table's name"),
        ("asset(a & a)", "names a table twice"),
        ("assets(a)", "write asset(<table>)"),
    ],
)
def test_a_schedule_on_assets_that_cannot_be_read_is_refused_naming_the_job_and_the_fix(
    tmp_path: Path, schedule: str, message: str
) -> None:
    from hubflow.registry import RegistryError

    registry = write_registry(tmp_path, [landing_job(tmp_path, "silver", schedule=schedule)])
    with pytest.raises(RegistryError, match="jobs") as error:
        load_registry(registry)
    assert "schedule" in str(error.value) and message in str(error.value), str(error.value)


def test_the_documented_events_schedule_builds_its_watcher(tmp_path: Path) -> None:
    """docs/airflow.md's ``schedule: events(...)`` entry, as written (its config made real)."""
    import re

    import yaml

    doc = (Path(__file__).resolve().parents[2] / "docs" / "airflow.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", doc, flags=re.S) if "schedule: events(" in b]
    (entry,) = yaml.safe_load(block)["jobs"]
    entry["config"] = landing_job(tmp_path, entry["name"])["config"]
    dags = build_dags(load_registry(write_registry(tmp_path, [entry])))
    (watcher,) = dags[f"{entry['name']}__available_now"].schedule.watchers
    assert watcher.trigger.poll_interval == 10.0
    assert watcher.trigger.eventhubs_conn_id == "eventhubs_default"


def test_every_dag_of_a_job_carries_its_access_and_cleanup_none(tmp_path: Path) -> None:
    access = {"read": ["clicks_viewers"], "act": ["clicks_oncall"]}
    jobs = [
        landing_job(tmp_path, "clicks", streaming=True, access=access),
        landing_job(tmp_path, "orders", access={"act": ["orders_team"]}),
        landing_job(tmp_path, "returns", schedule="@daily"),
    ]
    dags = build_dags(load_registry(write_registry(tmp_path, jobs)))
    clicks = {
        "clicks_viewers": {"DAGs": {"can_read"}, "DAG Runs": {"can_read"}},
        "clicks_oncall": {"DAGs": {"can_read", "can_edit"}, "DAG Runs": {"can_read", "can_create"}},
    }
    assert dags["clicks__supervisor"].access_control == clicks
    assert dags["clicks__oncall"].access_control == clicks, "the on-call DAG is the job's too"
    assert dags["clicks__backfill"].access_control == clicks, "so is the backfill DAG"
    assert dags["orders__available_now"].access_control == {
        "orders_team": {"DAGs": {"can_read", "can_edit"}, "DAG Runs": {"can_read", "can_create"}}
    }
    assert dags["returns__available_now"].access_control is None, "no access: the auth manager's defaults"
    assert dags["hubflow__cleanup"].access_control is None, "every job's cleanup: admins only"


def test_a_job_with_quarantine_after_gets_a_review_dag_run_by_its_quarantine_asset(tmp_path: Path) -> None:
    from airflow.providers.standard.operators.hitl import HITLOperator
    from airflow.sdk import Asset, AssetAlias

    access = {"act": ["clicks_oncall"]}
    registry = write_registry(
        tmp_path,
        [
            landing_job(tmp_path, "clicks", streaming=True, quarantine_after=3, access=access),
            landing_job(tmp_path, "views", streaming=True),
        ],
    )
    dags = build_dags(load_registry(registry))
    review = dags["clicks__quarantine_review"]
    assert "views__quarantine_review" not in dags, "only jobs with quarantine_after are reviewed"
    assert review.max_active_runs == 1 and {"hubflow", "quarantine"} <= set(review.tags)
    assert review.access_control == dags["clicks__oncall"].access_control
    assert review.timetable.asset_condition == Asset(
        name="clicks__quarantined", uri="hubflow-quarantine://clicks"
    )
    assert _edges(review) == {("ask_oncall", "carry_out_answer")}
    question = review.get_task("ask_oncall")
    assert isinstance(question, HITLOperator)
    assert question.options == ["Resume", "Rewind", "Keep held"] and not question.multiple
    assert set(question.params) == {"reason", "rewind_to_enqueued_time"}
    outlets = dags["clicks__supervisor"].get_task("ensure_running").outlets
    assert AssetAlias("hubflow.clicks.quarantine") in outlets
    assert Asset(name="clicks__quarantined", uri="hubflow-quarantine://clicks") not in outlets, (
        "an asset outlet would get an event at every successful run"
    )
    views = dags["views__supervisor"].get_task("ensure_running").outlets
    assert AssetAlias("hubflow.views.quarantine") not in views


def test_finish_within_becomes_a_deadline_alert_from_the_runs_queued_time_paging_the_job(
    tmp_path: Path,
) -> None:
    from airflow.sdk import DeadlineReference, SyncCallback
    from airflow.serialization.serialized_objects import DagSerialization

    from hubflow_plugins.notifications.deadline_alerts import page_deadline_missed

    alerts = {"notifiers": [{"smtp": {"to": "oncall@example.com"}}]}
    jobs = [
        landing_job(tmp_path, "orders", finish_within="45m", alerts=alerts),
        landing_job(tmp_path, "returns", alerts=alerts),
    ]
    dags = build_dags(load_registry(write_registry(tmp_path, jobs)))
    (alert,) = dags["orders__available_now"].deadline
    assert alert.reference == DeadlineReference.DAGRUN_QUEUED_AT
    assert alert.interval == timedelta(minutes=45)
    assert alert.callback == SyncCallback(
        page_deadline_missed, kwargs={"job_name": "orders", "finish_within": "45m"}
    )
    assert not dags["returns__available_now"].deadline, "no finish_within: no deadline"
    serialized = DagSerialization.to_dict(dags["orders__available_now"])["dag"]["deadline"]
    assert serialized[0]["callback"]["__data__"]["path"] == (
        "hubflow_plugins.notifications.deadline_alerts.page_deadline_missed"
    )


def test_the_deadline_example_of_the_runbook_builds_its_deadline_alert(tmp_path: Path) -> None:
    """docs/operations.md "A run past its deadline": its registry entry as written."""
    import re

    from hubflow.repository import REPO_ROOT

    doc = (REPO_ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = doc.split("### A run past its deadline", 1)[1].split("\n## ", 1)[0]
    (example,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    path = tmp_path / "registry.yaml"
    path.write_text(example, encoding="utf-8")
    (alert,) = build_dags(load_registry(path))["landing_orders__available_now"].deadline
    assert alert.interval == timedelta(minutes=45)
    assert alert.callback.kwargs == {"job_name": "landing_orders", "finish_within": "45m"}


def test_a_job_that_can_backfill_gets_a_backfill_dag_of_hours_the_scheduler_never_runs(
    tmp_path: Path,
) -> None:
    """``<job>__backfill``, for streaming and scheduled jobs alike: hourly partitions whose keys
    hubflow reads back; scheduled runs are impossible (``end_date`` before the first hour); a run
    without an hour fails (``interval_only``). A job that cannot backfill gets none."""
    from airflow.sdk import AssetAlias, CronPartitionTimetable

    from hubflow.lake_assets import alias_name
    from hubflow.partitions import KEY_FORMAT

    jobs = [
        landing_job(tmp_path, "clicks", streaming=True),
        landing_job(tmp_path, "orders"),
        {
            "name": "replay",
            "application": "lake_to_eventhubs",  # cannot backfill
            "config": str(tmp_path / "replay.yaml"),
            "mode": "scheduled",
            "schedule": "@hourly",
        },
    ]
    dags = build_dags(load_registry(write_registry(tmp_path, jobs)))

    assert "replay__backfill" not in dags
    for job in ("clicks", "orders"):
        backfill = dags[f"{job}__backfill"]
        assert backfill.timetable == CronPartitionTimetable(
            "0 * * * *", timezone="UTC", key_format=KEY_FORMAT
        )
        assert backfill.end_date is not None and backfill.end_date <= backfill.start_date
        assert backfill.allowed_run_types is None, "the UI's Backfill is in the Trigger dialog"
        assert backfill.max_active_runs == 1
        run = backfill.get_task("run_job")
        assert run.interval_only and run.outlets == [AssetAlias(alias_name(job))]
    assert (
        dags["orders__backfill"].default_args["retries"]
        == dags["orders__available_now"].default_args["retries"]
    ), "a scheduled job's retries, as its own DAG's"


def test_a_job_on_tables_follows_their_partitioned_events_with_a_second_dag(tmp_path: Path) -> None:
    """``<job>__follow``: the same tables as ``__available_now`` in a partitioned asset timetable
    (so only partitioned events run it, and only unpartitioned ones run ``__available_now``)."""
    from airflow.sdk import PartitionedAssetTimetable
    from airflow.sdk.definitions.asset import AssetNameRef

    jobs = [
        landing_job(tmp_path, "clicks", streaming=True),
        landing_job(tmp_path, "silver", schedule="asset(clicks)"),
        {
            "name": "replay",
            "application": "lake_to_eventhubs",  # cannot backfill: nothing to follow with
            "config": str(tmp_path / "replay.yaml"),
            "mode": "scheduled",
            "schedule": "asset(clicks)",
        },
    ]
    dags = build_dags(load_registry(write_registry(tmp_path, jobs)))

    follow = dags["silver__follow"]
    assert isinstance(follow.timetable, PartitionedAssetTimetable)
    assert follow.timetable.asset_condition == AssetNameRef(name="clicks")
    assert dags["silver__available_now"].schedule == AssetNameRef(name="clicks"), "unchanged: incremental"
    assert follow.get_task("run_job").interval_only
    assert "replay__follow" not in dags
