"""On-call holds: the ``HOLD`` marker keeps a job stopped, and says what kind of hold it is and whose.

A hold has a *kind* (:class:`HoldKind`) besides who placed it, when and why (the
:class:`~hubflow.status.liveness.Marker`). An action releases only the kind of hold it places: a
rewind's end releases its own ``rewind`` hold and leaves a ``stop`` placed meanwhile; ``start`` and
``restart`` release a ``stop`` hold (the user's own stop), not a rewind in progress, an upgrade or a
quarantine. Taking over another kind of hold needs ``force`` with a reason, and the takeover is said
(:func:`takeover_text`). A HOLD file written before kinds existed reads as a ``stop`` hold.
"""

from __future__ import annotations

from enum import StrEnum

from hubflow.status.liveness import Marker


class HoldKind(StrEnum):
    """Why a job is held: the action that placed the hold (and the only one that releases it)."""

    STOP = "stop"  # on-call stop: released by start or restart
    REWIND = "rewind"  # a rewind in progress: released by the rewind's end
    UPGRADE = "upgrade"  # an upgrade in progress: released by the upgrade's end
    QUARANTINE = "quarantine"  # kept stopped until a person looks: released only with force

    @property
    def phrase(self) -> str:
        """``a stop``, ``a rewind``, ``an upgrade``, ``a quarantine``: for messages."""
        return f"{'an' if self.value[0] in 'aeiou' else 'a'} {self.value}"


def hold_kind(value: object) -> HoldKind:
    """The kind a HOLD document names; a document without one (older hubflow) is a ``stop``."""
    try:
        return HoldKind(str(value)) if value else HoldKind.STOP
    except ValueError:
        return HoldKind.STOP


def kind_of(hold: Marker) -> HoldKind:
    """The kind of ``hold`` (a marker read without a kind is a ``stop`` hold)."""
    return hold_kind(hold.kind)


def held_text(job: str, hold: Marker) -> str:
    """``job J is held by B for a rewind since T (reason)``: the hold, said whole."""
    by = f" by {hold.by}" if hold.by else ""
    since = f" since {hold.at}" if hold.at else ""
    why = f" ({hold.reason})" if hold.reason else ""
    return f"job {job} is held{by} for {kind_of(hold).phrase}{since}{why}"


def may_release(hold: Marker, kind: HoldKind | None, *, force: bool = False) -> bool:
    """Whether an action that releases holds of ``kind`` (None: any) may remove ``hold``."""
    return force or kind is None or kind_of(hold) == kind


def kept_text(job: str, hold: Marker, action: str) -> str:
    """Why ``action`` leaves ``hold`` in place, and how to take it over."""
    releases = HoldKind.STOP.phrase if action in ("start", "restart") else "its own"
    return (
        f"{held_text(job, hold)}; {action} releases only {releases} hold: "
        "pass force with a reason to take over"
    )


def takeover_text(hold: Marker, by: str | None, reason: str | None) -> str:
    """``alice took over the hold of bob for a rewind since T (why it was placed): reason``."""
    who = by or "someone"
    owner = f" of {hold.by}" if hold.by else ""
    since = f" since {hold.at}" if hold.at else ""
    placed = f" ({hold.reason})" if hold.reason else ""
    return f"{who} took over the hold{owner} for {kind_of(hold).phrase}{since}{placed}: {reason}"


class HoldKeptError(RuntimeError):
    """A release found a hold it may not remove (another kind, no force); ``hold`` is that hold."""

    def __init__(self, message: str, hold: Marker) -> None:
        super().__init__(message)
        self.hold = hold
