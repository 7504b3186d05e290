"""StreamingJobOperator called directly on real status folders (no scheduler, no Spark): what it does
for each action and state, and the errors that stop it. The runs through Airflow are in tests/dags."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import Asset
from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException

from hubflow.status import JobState, JobStatus, StatusFolder
from hubflow_plugins.operators.streaming_job import StreamingJobOperator
from tests.dags.helpers import landing_job, write_registry

pytestmark = pytest.mark.integration


def _context(user: str | None = "alice") -> dict[str, Any]:
    dag_run = SimpleNamespace(run_type="manual", run_id="manual__1", triggering_user_name=user)
    return {"dag_run": dag_run, "run_id": "manual__1"}


class _Events:
    """``context["outlet_events"]``: what each alias was given, as (asset, extra) pairs."""

    def __init__(self, added: dict[Any, list]) -> None:
        self.added = added

    def __getitem__(self, alias: Any) -> Any:
        pairs = self.added.setdefault(alias, [])
        return SimpleNamespace(add=lambda asset, extra=None: pairs.append((asset, extra or {})))


def _folder(tmp_path: Path) -> StatusFolder:
    return StatusFolder(str(tmp_path / "clicks" / "status" / "clicks"))


def _action(action: str, **kwargs: Any) -> StreamingJobOperator:
    return StreamingJobOperator(task_id="oncall_action", job_name="clicks", action=action, **kwargs)


def test_an_unknown_action_fails_naming_it_and_the_valid_ones(registry: Path) -> None:
    with pytest.raises(AirflowFailException, match=r"unknown action 'restrat'; expected one of .*'restart'"):
        _action("restrat").execute(_context())


def test_a_restart_loop_fails_the_supervisor_but_not_an_oncall_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limited = landing_job(tmp_path, "clicks", streaming=True, max_restarts_per_hour=3)  # the optional limit
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(write_registry(tmp_path, [limited])))
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    folder = _folder(tmp_path)
    JobStatus(folder, "clicks").update(state=JobState.FAILED, exception="boom")
    for _ in range(3):
        folder.record_restart()
    with pytest.raises(AirflowFailException, match="restart-looping: restarted 3 times in the last hour"):
        _action("ensure_running").execute(_context(user=None))
    assert folder.restarts_within(3600) == 3, "nothing was started or counted"
    done = _action("start", dry_run="True").execute(_context())["done"]
    assert done == [
        f"would start job clicks from checkpoint {tmp_path / 'clicks' / 'checkpoints' / 'clicks'}"
    ]


def test_a_live_job_is_left_alone_and_a_dry_run_stop_changes_nothing(registry: Path, tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    JobStatus(folder, "clicks").update(state=JobState.RUNNING, pid=os.getpid())
    result = _action("ensure_running").execute(_context())
    assert result["done"] == ["already running; nothing to do"]

    done = _action("stop", dry_run=True, reason="sink full").execute(_context())["done"]
    assert done[0] == "would hold job clicks (alice (run manual__1): sink full) and stop it"
    assert done[1].startswith(f"would stop job clicks (pid {os.getpid()} on ")
    assert folder.hold() is None and folder.status()["state"] == "running", "a dry run changes nothing"


class _EarlierEvents:
    """Airflow's record of the events a job's alias announced, as the supervisor reads it back
    (``inlet_events[alias].ascending(False).limit(n)``): the events the earlier runs added."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def __getitem__(self, alias: Any) -> _EarlierEvents:
        return self

    def ascending(self, ascending: bool) -> _EarlierEvents:
        return self

    def limit(self, count: int) -> list[Any]:
        return list(reversed(self.events))[:count]

    def record(self, outlet_events: Any, job: str) -> dict[str, tuple[int, int]]:
        """Keep what a run announced (as Airflow does once it succeeds); return name -> (from, to)."""
        from airflow.sdk import AssetAlias

        from hubflow.lake_assets import alias_name

        added = outlet_events[AssetAlias(alias_name(job))].asset_alias_events
        for event in added:
            self.events.append(
                SimpleNamespace(asset=SimpleNamespace(uri=event.dest_asset_key.uri), extra=event.extra)
            )
        return {e.dest_asset_key.name: (e.extra["from_version"], e.extra["to_version"]) for e in added}


def _commit_batches(table: Path, *names: str) -> None:
    """Log files as Spark's file sink writes them in ``table/_spark_metadata`` (only names matter)."""
    (table / "_spark_metadata").mkdir(parents=True, exist_ok=True)
    for name in names:
        (table / "_spark_metadata" / name).write_text("v1\n", encoding="utf-8")


def test_the_supervisor_announces_each_parquet_batch_of_the_stream_once(
    registry: Path, tmp_path: Path
) -> None:
    """A live streaming job writing parquet (the registry's ``clicks``: output and quarantine through
    Spark's file sink): each supervisor run announces the batches committed since the job's last
    event, which Airflow keeps; a run with no new batch announces nothing."""
    from airflow.sdk.execution_time.context import OutletEventAccessors

    JobStatus(_folder(tmp_path), "clicks").update(state=JobState.RUNNING, pid=os.getpid())
    output, quarantine = tmp_path / "clicks" / "lake" / "orders", tmp_path / "clicks" / "quarantine"
    earlier = _EarlierEvents()

    def supervise() -> dict[str, tuple[int, int]]:
        context = {**_context(user=None), "inlet_events": earlier, "outlet_events": OutletEventAccessors()}
        assert _action("ensure_running").execute(context)["done"] == ["already running; nothing to do"]
        return earlier.record(context["outlet_events"], "clicks")

    assert supervise() == {}, "no batch yet"
    _commit_batches(output, "0", ".0.crc", "1", "2")
    _commit_batches(quarantine, "0", "1")
    assert supervise() == {"orders": (0, 2), "quarantine": (0, 1)}
    assert earlier.events[0].asset.uri == f"file://{output}"
    assert supervise() == {}, "announced once"
    _commit_batches(output, "3", ".4.5c1e.tmp")
    _commit_batches(quarantine, "2", "3")
    assert supervise() == {"orders": (3, 3), "quarantine": (2, 3)}


def test_rewind_is_for_event_hubs_jobs_only(registry: Path) -> None:
    with pytest.raises(AirflowFailException, match="job clicks has no eventhubs_conn_id: only Event Hubs"):
        _action("rewind", rewind_to_enqueued_time="2026-11-22T10:00:00Z").execute(_context())


def test_oncall_stop_and_start_go_in_the_audit_trail_with_who_what_and_the_hold(
    registry: Path, tmp_path: Path
) -> None:
    """Every on-call action is recorded (dry run or not, done or failed) with the hold before and
    after; the supervisor's routine run that starts nothing is not, its start attempt is."""
    from hubflow.operations.audit import read_audit

    folder = _folder(tmp_path)
    JobStatus(folder, "clicks").update(state=JobState.FAILED, exception="boom")

    _action("stop", reason="sink full").execute(_context())
    hold = folder.hold()
    assert hold is not None
    _action("start", dry_run="True", reason="sink fixed").execute(_context(user="bob"))
    assert _action("ensure_running").execute(_context(user=None))["done"][0].startswith("job clicks is held")
    with pytest.raises(
        AirflowNotFoundException, match="spark_default"
    ):  # no Spark connection: the start fails
        _action("start", reason="sink fixed").execute(_context(user="bob"))
    with pytest.raises(
        AirflowNotFoundException, match="spark_default"
    ):  # the supervisor finds it dead, tries a start
        _action("ensure_running").execute(_context(user=None))

    stop, dry_start, start, supervisor_start = read_audit(folder)
    assert (stop.by, stop.action, stop.dry_run, stop.reason) == (
        "alice (run manual__1)",
        "stop",
        False,
        "sink full",
    )
    held = f"held job clicks {hold.describe()}; supervisors leave it stopped until start"
    assert stop.outcome == f"done: {held}; nothing to stop"
    assert (stop.hold_before, stop.hold_after, stop.source) == (None, hold.describe(), "airflow")

    assert (dry_start.by, dry_start.action, dry_start.dry_run) == ("bob (run manual__1)", "start", True)
    assert dry_start.outcome.startswith(
        f"done: would release the hold {hold.describe()}; would start job clicks"
    )
    assert dry_start.hold_before == dry_start.hold_after == hold.describe(), "a dry run keeps the hold"

    assert (start.by, start.action, start.dry_run, start.reason) == (
        "bob (run manual__1)",
        "start",
        False,
        "sink fixed",
    )
    assert start.outcome.startswith(
        "failed: AirflowNotFoundException: job clicks: the Airflow connection 'spark_default' does not"
    )
    assert (start.hold_before, start.hold_after) == (hold.describe(), None), "released before the start"

    assert (supervisor_start.by, supervisor_start.action) == ("supervisor (run manual__1)", "ensure_running")
    assert supervisor_start.outcome.startswith("failed: ") and supervisor_start.hold_before is None
    assert start.line().startswith(f"{start.at} bob (run manual__1): start because sink fixed -> failed: ")


def test_a_supervisor_run_that_starts_nothing_and_a_refused_action_are_recorded_as_such(
    registry: Path, tmp_path: Path
) -> None:
    from hubflow.operations.audit import read_audit

    folder = _folder(tmp_path)
    JobStatus(folder, "clicks").update(state=JobState.RUNNING, pid=os.getpid())
    _action("ensure_running").execute(_context(user=None))
    assert read_audit(folder) == [], "a routine run that finds the job alive is not an action"
    with pytest.raises(AirflowFailException, match="only Event Hubs jobs rewind"):
        _action("rewind", rewind_to_enqueued_time="2026-11-22T10:00:00Z").execute(_context())
    (refused,) = read_audit(folder)
    assert (refused.action, refused.by, refused.dry_run) == ("rewind", "alice (run manual__1)", False)
    assert refused.outcome == "refused: job clicks has no eventhubs_conn_id: only Event Hubs jobs rewind"


def test_start_releases_only_a_stop_hold_and_force_takes_over_with_a_reason(
    registry: Path, tmp_path: Path
) -> None:
    from hubflow.operations.rewind import REWIND_HOLD_REASON
    from hubflow.status import HoldKind

    folder = _folder(tmp_path)
    rewind = folder.place_hold(REWIND_HOLD_REASON, by="bob (run manual__0)", kind=HoldKind.REWIND)
    held = f"job clicks is held by bob (run manual__0) for a rewind since {rewind.at} ({REWIND_HOLD_REASON})"
    for action in ("start", "restart"):
        with pytest.raises(AirflowFailException) as refused:
            _action(action).execute(_context())
        assert str(refused.value) == (
            f"{held}; {action} releases only a stop hold: pass force with a reason to take over"
        )
    with pytest.raises(AirflowFailException, match="force takes over a hold another action placed: give a"):
        _action("start", force=True).execute(_context())
    done = _action("start", force="True", reason="the rewind died", dry_run=True).execute(_context())["done"]
    assert done[0] == (
        f"would take over: alice (run manual__1) took over the hold of bob (run manual__0) for a rewind "
        f"since {rewind.at} ({REWIND_HOLD_REASON}): the rewind died"
    )
    assert folder.hold() == rewind, "refusals and dry runs change nothing"

    # The supervisor says whose hold it is and how to take over; a stop replaces it, saying so.
    report = _action("ensure_running").execute(_context(user=None))["done"][0]
    assert report.startswith("job clicks is held by bob (run manual__0) at ") and "(a rewind)" in report
    assert report.endswith("to take over, run clicks__oncall with force and a reason.")
    stopped = _action("stop", reason="sink full").execute(_context())["done"][0]
    assert stopped.endswith(f"supervisors leave it stopped until start (replacing: {held})")
    assert folder.hold().kind == "stop" and folder.hold().reason == "sink full"


def test_one_action_at_a_time_a_second_is_refused_the_supervisor_waits_and_stop_does_not(
    registry: Path, tmp_path: Path
) -> None:
    """While an action holds the job's lock (here a rewind from the command line), on-call start,
    restart and rewind are refused naming it, who and since when (and recorded as refused); the
    supervisor leaves the job to it and succeeds; a dry run says it would be refused; a stop, the
    emergency brake, still holds the job."""
    from hubflow.operations.audit import read_audit
    from hubflow.status.action_lock import ActionLock

    folder = _folder(tmp_path)
    JobStatus(folder, "clicks").update(state=JobState.FAILED, exception="boom")
    lock = ActionLock(folder, "clicks", "rewind", "carol", "cli")
    with lock.held():
        holder = folder.read_json("action.lock")
        in_progress = f"job clicks: a rewind started by carol (cli) at {holder['at']} is in progress"
        for action in ("start", "restart"):
            with pytest.raises(AirflowFailException) as refused:
                _action(action).execute(_context())
            assert str(refused.value).startswith(in_progress)
            assert f"the {action} is refused" in str(refused.value)
        supervised = _action("ensure_running").execute(_context(user=None))["done"]
        assert supervised == [
            f"{in_progress} (its lock expires at {holder['expires_at']} unless renewed); the supervisor "
            "leaves the job to it this run"
        ]
        dry = _action("start", dry_run=True).execute(_context())["done"]
        assert dry[0].startswith(in_progress) and dry[0].endswith("this action would be refused now")
        stopped = _action("stop", reason="sink full").execute(_context())["done"]
        assert stopped[0].startswith(in_progress) and stopped[0].endswith("a stop does not wait for it")
        assert folder.hold().kind == "stop" and folder.hold().by == "alice (run manual__1)"
        assert folder.read_json("action.lock")["token"] == lock.token, "the lock stays the rewind's"
    start, restart, dry_start, stop = read_audit(folder)
    assert start.outcome.startswith(f"refused: {in_progress}") and restart.action == "restart"
    assert (dry_start.dry_run, stop.action) == (True, "stop")
    assert stop.outcome.startswith("done: ")


def test_a_cleared_oncall_run_is_refused_and_recorded_not_run_under_the_first_users_name(
    registry: Path, tmp_path: Path
) -> None:
    from hubflow.operations.audit import read_audit

    folder = _folder(tmp_path)
    cleared = {**_context(user="alice"), "ti": SimpleNamespace(try_number=2)}
    with pytest.raises(AirflowFailException, match=r"this on-call run was cleared or run again \(try 2\)"):
        _action("stop", reason="sink full").execute(cleared)
    assert folder.hold() is None, "nothing was done"
    (refused,) = read_audit(folder)
    assert (refused.action, refused.outcome.split(":")[0]) == ("stop", "refused")
    # The supervisor's runs are not on-call actions: a cleared supervisor run supervises as usual.
    JobStatus(folder, "clicks").update(state=JobState.RUNNING, pid=os.getpid())
    supervised = _action("ensure_running").execute(
        {**_context(user=None), "ti": SimpleNamespace(try_number=3)}
    )
    assert supervised["done"] == ["already running; nothing to do"]


@pytest.mark.parametrize("kind", ["upgrade", "quarantine"])
def test_a_stop_keeps_an_upgrade_or_quarantine_hold_so_a_start_cannot_release_it(
    registry: Path, tmp_path: Path, kind: str
) -> None:
    """A stop replaces a stop or rewind hold with its own (a stop during a rewind survives its end),
    but never turns an upgrade or a quarantine into a hold any start would release."""
    from hubflow.status import HoldKind

    folder = _folder(tmp_path)
    placed = folder.place_hold("crash-looping", by="supervisor", kind=HoldKind(kind))
    done = _action("stop", reason="sink full").execute(_context())["done"]
    assert done[0] == (
        f"job clicks is held by supervisor for {HoldKind(kind).phrase} since {placed.at} (crash-looping): "
        "the stop keeps that hold (a start needs force with a reason to take it over)"
    )
    assert folder.hold() == placed
    with pytest.raises(AirflowFailException, match=f"for {HoldKind(kind).phrase} since"):
        _action("start").execute(_context())


def test_a_crash_looping_job_is_quarantined_and_only_force_with_a_reason_lets_it_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime, timedelta

    from hubflow.operations.audit import read_audit

    looping = landing_job(tmp_path, "clicks", streaming=True, quarantine_after=2, restart_backoff="1 second")
    monkeypatch.setenv("HUBFLOW_REGISTRY", str(write_registry(tmp_path, [looping])))
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    folder = _folder(tmp_path)
    JobStatus(folder, "clicks").update(state=JobState.FAILED, exception="boom")
    now = datetime.now(UTC)
    for seconds in (60, 30):
        folder.record_restart(now - timedelta(seconds=seconds))

    announced: dict[Any, list] = {}
    context = {**_context(user=None), "outlet_events": _Events(announced)}
    done = _action("ensure_running").execute(context)["done"]
    hold = folder.hold()
    assert hold is not None and (hold.kind, hold.by) == ("quarantine", "run manual__1")
    ((alias, added),) = announced.items()
    assert alias.name == "hubflow.clicks.quarantine", "the review DAG's asset, through an alias"
    ((asset, extra),) = added
    assert asset == Asset(name="clicks__quarantined", uri="hubflow-quarantine://clicks")
    assert extra["job"] == "clicks" and extra["why"].startswith("crash-looping: restarted 2 times")
    assert hold.reason.startswith("crash-looping: restarted 2 times since ")
    assert done[-1] == (
        f"held job clicks {hold.describe()} for a quarantine: it is not restarted until a person decides: "
        "clicks__oncall start or restart with force and a reason, or rewind with force"
    )
    assert folder.restarts_within(3600) == 2, "nothing was started"
    report = _action("ensure_running").execute(_context(user=None))["done"][0]
    assert report.startswith("job clicks is held by run manual__1") and "(a quarantine)" in report
    with pytest.raises(
        AirflowFailException, match=r"for a quarantine since .*start releases only a stop hold"
    ):
        _action("start").execute(_context())
    forced = _action("start", force=True, reason="fixed the sink", dry_run=True).execute(_context())["done"]
    assert forced[0].startswith("would take over: alice (run manual__1) took over the hold of run manual__1")
    quarantine = read_audit(folder)[0]
    assert (quarantine.action, quarantine.by) == ("ensure_running", "supervisor (run manual__1)")
    assert quarantine.hold_after == hold.describe() and quarantine.outcome.startswith("done: crash-looping")
