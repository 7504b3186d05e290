"""The JSON documents of a status folder (status.json, the lease, markers): how they are stored and
read back, and what their time fields mean."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from typing import Any

from hubflow.utc_times import utc_time


def utc_now() -> str:
    """The current time as an ISO 8601 UTC string, e.g. ``2026-01-02T03:04:05.678+00:00``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def age_seconds(iso_time: Any, now: datetime | None = None) -> float | None:
    """Seconds since the ISO time ``iso_time`` (naive = UTC), or None when it is not a time."""
    moment = utc_time(iso_time)
    if moment is None:
        return None
    return ((now or datetime.now(UTC)) - moment).total_seconds()


def dump_document(document: dict[str, Any]) -> bytes:
    """A document as the status folder stores it: indented JSON, keys sorted."""
    return json.dumps(document, indent=2, sort_keys=True, default=str).encode("utf-8")


def load_document(data: bytes) -> dict[str, Any]:
    """A stored JSON object, or ``{}`` for anything that is not one (torn, empty, not JSON)."""
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        document = json.loads(data.decode("utf-8"))
        if isinstance(document, dict):
            return document
    return {}


def text_or_none(value: Any) -> str | None:
    """A document field as text; None stays None."""
    return None if value is None else str(value)
