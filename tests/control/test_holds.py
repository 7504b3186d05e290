"""Holds have kinds and owners: an action releases only the kind of hold it places, a takeover needs
force with a reason and says so, and a release never deletes a hold that replaced the one it read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hubflow.status import HOLD_MARKER, HoldKeptError, HoldKind, StatusFolder
from hubflow.status.holds import held_text, takeover_text


def _folder(tmp_path: Path) -> StatusFolder:
    return StatusFolder(str(tmp_path / "status" / "orders"))


def test_a_hold_records_its_kind_and_an_old_hold_without_one_is_a_stop(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    hold = folder.place_hold("rewinding", by="bob", kind=HoldKind.REWIND)
    assert folder.hold() == hold and hold.kind == "rewind" and hold.by == "bob"
    assert json.loads(Path(folder.path(HOLD_MARKER)).read_text())["kind"] == "rewind"
    # A HOLD file of an older hubflow: no kind.
    old = {"at": "2026-11-01T00:00:00+00:00", "by": "alice", "reason": "x"}
    Path(folder.path(HOLD_MARKER)).write_text(json.dumps(old))
    assert folder.hold().kind == "stop"
    assert folder.release_hold(HoldKind.STOP, by="carol").by == "alice"


def test_an_action_releases_only_its_own_kind_of_hold(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    rewind = folder.place_hold("rewind in progress", by="bob", kind=HoldKind.REWIND)
    with pytest.raises(HoldKeptError) as kept:
        folder.release_hold(HoldKind.STOP, by="alice", action="start")
    assert kept.value.hold == rewind and folder.hold() == rewind
    assert str(kept.value) == (
        f"job orders is held by bob for a rewind since {rewind.at} (rewind in progress); start "
        "releases only a stop hold: pass force with a reason to take over"
    )
    assert folder.release_hold(HoldKind.REWIND, by="bob", placed=rewind) == rewind
    assert folder.hold() is None
    assert folder.release_hold(HoldKind.REWIND, by="bob") is None, "nothing to release"


def test_a_stop_placed_during_a_rewind_survives_the_rewinds_release(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    rewind = folder.place_hold("rewind in progress", by="bob", kind=HoldKind.REWIND)
    stop = folder.place_hold("sink full", by="alice", kind=HoldKind.STOP)
    with pytest.raises(HoldKeptError, match="job orders is held by alice for a stop since"):
        folder.release_hold(HoldKind.REWIND, by="bob", placed=rewind, action="the rewind")
    assert folder.hold() == stop
    # Another rewind's hold is not this rewind's either.
    other = folder.place_hold("rewind in progress", by="dave", kind=HoldKind.REWIND)
    with pytest.raises(HoldKeptError):
        folder.release_hold(HoldKind.REWIND, by="bob", placed=rewind)
    assert folder.hold() == other


def test_force_takes_over_any_hold_and_needs_a_reason(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    quarantine = folder.place_hold("bad events from producer X", by="bob", kind=HoldKind.QUARANTINE)
    with pytest.raises(ValueError, match="needs a reason"):
        folder.release_hold(HoldKind.STOP, by="alice", force=True)
    assert folder.hold() == quarantine
    released = folder.release_hold(HoldKind.STOP, by="alice", force=True, reason="producer fixed")
    assert released == quarantine and folder.hold() is None
    assert takeover_text(released, "alice", "producer fixed") == (
        f"alice took over the hold of bob for a quarantine since {quarantine.at} "
        "(bad events from producer X): producer fixed"
    )
    assert held_text("orders", quarantine).startswith("job orders is held by bob for a quarantine since")
    assert str(HoldKind.UPGRADE.phrase) == "an upgrade"


def test_a_release_never_deletes_a_hold_that_replaced_the_one_it_read(tmp_path: Path) -> None:
    """The stop lands between the rewind's read of its hold and its delete: the delete names the
    version it read, finds another, judges that one and keeps it."""
    folder = _folder(tmp_path)
    rewind = folder.place_hold("rewind in progress", by="bob", kind=HoldKind.REWIND)
    store = folder.store
    real_delete = store.delete
    placed: list[object] = []

    def delete_after_a_stop(name: str, if_version: str) -> bool:
        if not placed:
            placed.append(folder.place_hold("sink full", by="alice"))
        return real_delete(name, if_version)

    store.delete = delete_after_a_stop  # type: ignore[method-assign]
    with pytest.raises(HoldKeptError, match="held by alice for a stop"):
        folder.release_hold(HoldKind.REWIND, by="bob", placed=rewind)
    assert folder.hold() == placed[0]


def test_the_old_release_without_a_kind_still_releases_any_hold(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    hold = folder.place_hold("upgrading", by="ci", kind=HoldKind.UPGRADE)
    assert folder.release_hold() == hold and folder.hold() is None
