"""The supervision decision as a pure function: every action against every state it can find, the
restart backoff (growth, ceiling, reset after a healthy run, when the next start is due), the
optional hourly limit, and the restart of a job whose config changed."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from hubflow.supervision.supervisor import (
    STREAMING_ACTIONS,
    Decision,
    RestartPolicy,
    Step,
    backoff_view,
    decide,
    job_fingerprint,
)

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
#: 30 s base, 4 min ceiling (30, 60, 120, 240 capped), healthy after 10 minutes.
POLICY = RestartPolicy(backoff_seconds=30, max_backoff_seconds=240, healthy_after_seconds=600)


def _decide(action: str, alive: bool, held: bool, **found: object) -> Decision:
    found.setdefault("now", NOW)
    found.setdefault("policy", POLICY)
    return decide(action, alive=alive, held=held, **found)  # type: ignore[arg-type]


def _ago(*seconds: float) -> list[datetime]:
    return [NOW - timedelta(seconds=s) for s in seconds]


@pytest.mark.parametrize(
    ("action", "alive", "held", "steps"),
    [
        ("ensure_running", False, False, (Step.START,)),
        ("ensure_running", True, False, (Step.ALREADY_RUNNING,)),
        ("ensure_running", False, True, (Step.REPORT_HOLD,)),
        ("ensure_running", True, True, (Step.REPORT_HOLD,)),  # an unfinished stop: reported, not started
        ("stop", True, False, (Step.PLACE_HOLD, Step.STOP)),
        ("stop", False, False, (Step.PLACE_HOLD, Step.NOTHING_TO_STOP)),
        ("stop", True, True, (Step.PLACE_HOLD, Step.STOP)),  # a second stop replaces the hold's reason
        ("start", False, True, (Step.RELEASE_HOLD, Step.START)),
        ("start", True, False, (Step.ALREADY_RUNNING,)),
        ("start", True, True, (Step.RELEASE_HOLD, Step.ALREADY_RUNNING)),
        ("restart", True, True, (Step.RELEASE_HOLD, Step.STOP, Step.START)),
        ("restart", True, False, (Step.STOP, Step.START)),
        ("restart", False, False, (Step.START,)),
    ],
)
def test_each_action_in_each_state(action: str, alive: bool, held: bool, steps: tuple[Step, ...]) -> None:
    decision = _decide(action, alive, held)
    assert decision.steps == steps and decision.refusal is None


def test_a_hold_is_placed_before_anything_stops_and_released_before_anything_starts() -> None:
    """The order that keeps a supervisor run from starting a job on-call is stopping (#28)."""
    for action, alive, held in itertools.product(("stop", "start", "restart"), (True, False), (True, False)):
        steps = _decide(action, alive, held).steps
        if Step.PLACE_HOLD in steps:
            assert steps[0] == Step.PLACE_HOLD and Step.START not in steps
        if Step.RELEASE_HOLD in steps:
            assert steps[0] == Step.RELEASE_HOLD


# The backoff ------------------------------------------------------------------------------------


def test_the_pause_doubles_from_the_base_up_to_the_ceiling() -> None:
    assert [POLICY.pause_after(n) for n in range(7)] == [0, 30, 60, 120, 240, 240, 240]
    assert [POLICY.at_ceiling(n) for n in range(6)] == [False, False, False, False, True, True]


def test_the_first_death_after_a_healthy_run_starts_at_once_and_counts() -> None:
    decision = _decide("ensure_running", alive=False, held=False)
    assert decision.steps == (Step.START,) and decision.count_restart and decision.restart_loop == ""


def test_a_dead_job_waits_out_the_growing_pause_and_is_told_when_the_next_start_is_due() -> None:
    # one restart 10 s ago: the pause is 30 s, due in 20 s
    waiting = _decide("ensure_running", alive=False, held=False, restarts=_ago(10))
    assert waiting.steps == (Step.WAIT_BACKOFF,) and not waiting.count_restart
    assert waiting.next_start_at == NOW + timedelta(seconds=20)
    assert "the next start is due at 2026-11-22T10:00:20+00:00 (in 20 s)" in waiting.note
    assert "the pause after the last restart (2026-11-22T09:59:50+00:00) is 30 s" in waiting.note
    # 31 s later it is due: started, counted
    due = _decide("ensure_running", alive=False, held=False, restarts=_ago(31))
    assert due.steps == (Step.START,) and due.count_restart and "starting it again" in due.note
    # three restarts in the streak: the pause is 120 s after the last one
    three = _ago(200, 150, 100)
    assert _decide(
        "ensure_running", alive=False, held=False, restarts=three
    ).next_start_at == NOW + timedelta(seconds=20)
    assert _decide("ensure_running", alive=False, held=False, restarts=_ago(200, 150, 121)).steps == (
        Step.START,
    )


def test_the_pause_stops_growing_at_the_ceiling_and_that_is_a_restart_loop() -> None:
    streak = _ago(2000, 1900, 1800, 1600, 100)  # five restarts: 30 * 2^4 = 480 capped at 240
    decision = _decide("ensure_running", alive=False, held=False, restarts=streak)
    assert decision.next_start_at == NOW + timedelta(seconds=140)
    assert decision.restart_loop.startswith("restart-looping: restarted 5 times since 2026-11-22T09:26:40")
    assert "the pause between restarts is at its ceiling of 4 min" in decision.restart_loop
    assert decision.refusal is None, "the supervisor backs off, it never gives up"
    # below the ceiling: no loop yet
    assert _decide("ensure_running", alive=False, held=False, restarts=streak[:3]).restart_loop == ""
    # a live job whose streak is at the ceiling is still looping until it runs healthy
    alive = _decide("ensure_running", alive=True, held=False, restarts=streak)
    assert alive.steps == (Step.ALREADY_RUNNING,) and alive.restart_loop.startswith("restart-looping")


def test_running_healthy_resets_the_backoff() -> None:
    streak = _ago(3000, 2900, 2800, 2700, 700)
    # alive 700 s since the last restart (>= 600): healthy, the streak is over, no loop
    alive = _decide("ensure_running", alive=True, held=False, restarts=streak)
    assert alive.reset_backoff and alive.restart_loop == ""
    # dead, but its last heartbeat was 650 s after the last restart: start at once
    dead = _decide(
        "ensure_running",
        alive=False,
        held=False,
        restarts=streak,
        last_alive_at=streak[-1] + timedelta(seconds=650),
    )
    assert dead.steps == (Step.START,) and dead.count_restart and dead.reset_backoff
    # dead after 100 s only: the streak goes on (five restarts: pause 240 s, due in 140 s)
    short = _decide(
        "ensure_running",
        alive=False,
        held=False,
        restarts=_ago(3000, 2900, 2800, 2700, 100),
        last_alive_at=NOW,
    )
    assert short.steps == (Step.WAIT_BACKOFF,) and short.next_start_at == NOW + timedelta(seconds=140)
    # restarts before the recorded reset do not count
    after_reset = _decide(
        "ensure_running",
        alive=False,
        held=False,
        restarts=_ago(3000, 2900, 2800, 2700, 100),
        backoff_reset_at=NOW - timedelta(seconds=150),
    )
    assert after_reset.steps == (Step.START,), "one restart in the streak: its 30 s pause is over"
    assert "restarted 1 time since 2026-11-22T09:58:20" in after_reset.note


def test_the_hourly_limit_is_optional_and_still_refuses_when_set() -> None:
    many = _ago(3000, 2000, 1000)
    assert _decide("ensure_running", alive=False, held=False, restarts=many).refusal is None
    limited = RestartPolicy(backoff_seconds=1, max_backoff_seconds=1, max_restarts_per_hour=3)
    refused = _decide("ensure_running", alive=False, held=False, restarts=many, policy=limited)
    assert (
        refused.steps == ()
        and refused.refusal == "restart-looping: restarted 3 times in the last hour (limit 3)"
    )
    assert refused.restart_loop == refused.refusal
    old = _ago(4000, 2000, 1000)  # one of them older than an hour
    assert _decide("ensure_running", alive=False, held=False, restarts=old, policy=limited).steps == (
        Step.START,
    )


def test_a_crash_loop_is_quarantined_after_quarantine_after_restarts_unless_a_fix_was_deployed() -> None:
    """``quarantine_after`` (optional): a dead job whose streak reached it is held, not restarted;
    a streak one shorter, a live job, a held one and a changed fingerprint are not quarantined."""
    quarantining = RestartPolicy(
        backoff_seconds=30, max_backoff_seconds=240, healthy_after_seconds=600, quarantine_after=3
    )
    three = _ago(900, 600, 300)  # due again: the pause after the third restart is 120 s

    def supervise(restarts: list[datetime], **found: object) -> Decision:
        found.setdefault("alive", False)
        found.setdefault("held", False)
        return _decide("ensure_running", restarts=restarts, policy=quarantining, **found)

    quarantined = supervise(three)
    assert quarantined.steps == (Step.QUARANTINE,) and not quarantined.count_restart
    assert (
        quarantined.note
        == quarantined.restart_loop
        == (
            f"crash-looping: restarted 3 times since {three[0].isoformat(timespec='seconds')} without "
            "running 10 min (quarantine_after: 3); quarantined until a person decides"
        )
    )
    assert supervise(three[1:]).steps == (Step.START,), "two restarts: not yet"
    assert supervise(three, alive=True).steps == (Step.ALREADY_RUNNING,)
    assert supervise(three, held=True).steps == (Step.REPORT_HOLD,)
    fixed = supervise(three, started_fingerprint="a" * 64, fingerprint="b" * 64)
    assert fixed.steps == (Step.START,) and fixed.reset_backoff, "a deployed fix is started at once"
    assert _decide("ensure_running", alive=False, held=False, restarts=three).steps == (Step.START,), (
        "unset by default"
    )


def test_only_the_supervisors_own_starts_count() -> None:
    for action in ("start", "restart"):  # on-call's deliberate start: no limit, no backoff, not counted
        limited = RestartPolicy(max_restarts_per_hour=1)
        decision = _decide(action, alive=False, held=False, restarts=_ago(1, 2, 3), policy=limited)
        assert decision.steps[-1] == Step.START and not decision.count_restart and decision.refusal is None
    # a live or held job is no restart, whatever the count
    many = _ago(1, 2, 3, 4, 5, 6)
    assert _decide("ensure_running", alive=False, held=True, restarts=many).steps == (Step.REPORT_HOLD,)
    assert _decide("ensure_running", alive=False, held=True, restarts=many).restart_loop == ""


# The fingerprint --------------------------------------------------------------------------------


def test_a_changed_fingerprint_restarts_a_live_job_once() -> None:
    changed = _decide(
        "ensure_running", alive=True, held=False, started_fingerprint="a" * 64, fingerprint="b" * 64
    )
    assert changed.steps == (Step.STOP, Step.START) and not changed.count_restart and changed.reset_backoff
    assert changed.note.startswith("what the job runs changed since it was started (fingerprint aaaaaaaaaaaa")
    # the start records the new fingerprint: the next run finds them equal and does nothing
    same = _decide(
        "ensure_running", alive=True, held=False, started_fingerprint="b" * 64, fingerprint="b" * 64
    )
    assert same.steps == (Step.ALREADY_RUNNING,) and not same.adopt_fingerprint


def test_no_recorded_fingerprint_is_adopted_without_a_restart() -> None:
    unknown = _decide(
        "ensure_running", alive=True, held=False, started_fingerprint=None, fingerprint="b" * 64
    )
    assert unknown.steps == (Step.ALREADY_RUNNING,) and unknown.adopt_fingerprint
    not_known = _decide(
        "ensure_running", alive=True, held=False, started_fingerprint="a" * 64, fingerprint=None
    )
    assert not_known.steps == (Step.ALREADY_RUNNING,), "no current fingerprint: no config rule"


def test_a_dead_job_whose_config_changed_starts_without_waiting_for_the_backoff() -> None:
    decision = _decide(
        "ensure_running",
        alive=False,
        held=False,
        restarts=_ago(10, 20, 30),
        started_fingerprint="a" * 64,
        fingerprint="b" * 64,
    )
    assert decision.steps == (Step.START,) and decision.count_restart and decision.reset_backoff
    held = _decide(
        "ensure_running", alive=True, held=True, started_fingerprint="a" * 64, fingerprint="b" * 64
    )
    assert held.steps == (Step.REPORT_HOLD,), "a held job is not restarted for a change"


def test_a_version_whose_upgrade_failed_is_no_change_to_start_at_once() -> None:
    """The previous version a rollback left running keeps the backoff and the quarantine: the
    version deployed meanwhile, whose upgrade failed, is not a fix (the supervisor never starts it)."""
    quarantining = RestartPolicy(
        backoff_seconds=30, max_backoff_seconds=240, healthy_after_seconds=600, quarantine_after=3
    )
    rolled_back = {
        "started_fingerprint": "a" * 64,
        "fingerprint": "b" * 64,
        "fingerprint_failed_upgrade": True,
    }
    waiting = _decide("ensure_running", alive=False, held=False, restarts=_ago(10), **rolled_back)
    assert waiting.steps == (Step.WAIT_BACKOFF,) and waiting.next_start_at == NOW + timedelta(seconds=20)
    assert not waiting.reset_backoff
    looping = _decide(
        "ensure_running",
        alive=False,
        held=False,
        restarts=_ago(900, 600, 300),
        policy=quarantining,
        **rolled_back,
    )
    assert looping.steps == (Step.QUARANTINE,), looping
    alive = _decide("ensure_running", alive=True, held=False, restarts=_ago(10), **rolled_back)
    assert alive.steps == (Step.ALREADY_RUNNING,) and not alive.reset_backoff, "no reset at every run"
    assert not alive.adopt_fingerprint


def test_the_fingerprint_covers_the_config_and_a_pipelines_module(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text("name: hot\n")
    (tmp_path / "pipelines").mkdir()
    module = tmp_path / "pipelines" / "hot_devices.py"
    module.write_text("def transform(events):\n    return events\n")
    first = job_fingerprint(config, "hot_devices:transform", tmp_path / "pipelines")
    assert first["module"]["path"] == str(module) and first["module"]["sha256"] != "missing"
    assert job_fingerprint(config, "hot_devices:transform", tmp_path / "pipelines") == first, "stable"
    module.write_text("def transform(events):\n    return events.limit(1)\n")
    second = job_fingerprint(config, "hot_devices:transform", tmp_path / "pipelines")
    assert second["digest"] != first["digest"] and second["config"] == first["config"]
    config.write_text("name: hot\n# a comment\n")
    assert (
        job_fingerprint(config, "hot_devices:transform", tmp_path / "pipelines")["digest"] != second["digest"]
    )
    builtin = job_fingerprint(config, "files_to_lake")
    assert "module" not in builtin and builtin["application"] == "files_to_lake"
    assert job_fingerprint(config, "gone:f", tmp_path / "pipelines")["module"]["sha256"] == "missing"


def test_rewind_and_unknown_actions_are_not_decided_here() -> None:
    assert "rewind" in STREAMING_ACTIONS
    for action in ("rewind", "reboot"):
        with pytest.raises(ValueError, match=f"no decision for action '{action}'"):
            _decide(action, alive=False, held=False)


def test_the_backoff_view_shows_the_streak_and_when_the_next_start_is_due() -> None:
    """What the status page shows: the streak decide() counts and the pause it waits."""
    restarts = [NOW - timedelta(seconds=s) for s in (200, 150, 40)]  # pauses 30, 60, then 120 s
    view = backoff_view(restarts, now=NOW, policy=POLICY, alive=False)
    assert view is not None
    assert (view["restarts"], view["pause_seconds"], view["at_ceiling"]) == (3, 120.0, False)
    due = restarts[-1] + timedelta(seconds=120)
    assert view["next_start_at"] == due.isoformat()
    assert f"Next start due at {due.isoformat(timespec='seconds')} (a pause of 2 min)" in view["text"]
    decision = decide("ensure_running", alive=False, held=False, now=NOW, restarts=restarts, policy=POLICY)
    assert decision.steps == (Step.WAIT_BACKOFF,) and decision.next_start_at == due
    later = backoff_view(restarts, now=due + timedelta(seconds=1), policy=POLICY, alive=False)
    assert later is not None and "The next supervisor run starts it." in later["text"]
    alive = backoff_view(restarts, now=NOW, policy=POLICY, alive=True)
    assert alive is not None and alive["next_start_at"] is None and "resets once" in alive["text"]
    looping = [NOW - timedelta(seconds=s) for s in (900, 800, 700, 600, 100)]  # 5th pause: 240 s
    view = backoff_view(looping, now=NOW, policy=POLICY, alive=False)
    assert view is not None and view["at_ceiling"] and "a restart loop" in view["text"]
    healthy = backoff_view(restarts, now=NOW + timedelta(hours=1), policy=POLICY, alive=True)
    assert healthy is None, "a run that lasted healthy_after ends the streak"
    assert backoff_view(restarts, now=NOW, policy=POLICY, alive=False, backoff_reset_at=NOW) is None
    assert backoff_view([], now=NOW, policy=POLICY, alive=False) is None
