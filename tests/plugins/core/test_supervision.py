"""The supervision decision as a pure function: every action against every state it can find."""

from __future__ import annotations

import itertools

import pytest

from hubflow_plugins.core.supervision import STREAMING_ACTIONS, Decision, Step, decide

LIMIT = 3


def _decide(action: str, alive: bool, held: bool, recent: int = 0) -> Decision:
    return decide(action, alive=alive, held=held, recent_restarts=recent, max_restarts_per_hour=LIMIT)


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


def test_only_the_supervisors_own_starts_count_and_its_restart_loop_is_refused() -> None:
    assert _decide("ensure_running", alive=False, held=False, recent=LIMIT - 1).count_restart
    refused = _decide("ensure_running", alive=False, held=False, recent=LIMIT)
    assert refused.steps == () and refused.refusal == (
        f"restart-looping: restarted {LIMIT} times in the last hour (limit {LIMIT})"
    )
    for action in ("start", "restart"):  # on-call's deliberate start: no limit, not counted
        decision = _decide(action, alive=False, held=False, recent=LIMIT * 10)
        assert decision.steps[-1] == Step.START and not decision.count_restart and decision.refusal is None
    # a live or held job is no restart, whatever the count
    assert _decide("ensure_running", alive=True, held=False, recent=LIMIT).steps == (Step.ALREADY_RUNNING,)
    assert _decide("ensure_running", alive=False, held=True, recent=LIMIT).steps == (Step.REPORT_HOLD,)


def test_rewind_and_unknown_actions_are_not_decided_here() -> None:
    assert "rewind" in STREAMING_ACTIONS
    for action in ("rewind", "reboot"):
        with pytest.raises(ValueError, match=f"no decision for action '{action}'"):
            _decide(action, alive=False, held=False)
