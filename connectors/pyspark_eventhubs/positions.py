"""EventPosition JSON as azure-event-hubs-spark writes it, and the per-partition position map.

An EventPosition says where to start (or end) in one partition: by offset (``"-1"`` = start of
stream, ``"@latest"`` = end of stream), by sequence number, or by enqueued time. The per-partition
map is keyed by ``{"ehName": "<hub>", "partitionId": N}`` serialized as a JSON string.
The retained range of a partition (:class:`PartitionBounds`) comes from its runtime information;
resolution of a position to a sequence number needs the broker and lives in ``hub_metadata.py``.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import EventHubsOptionError

START_OF_STREAM = "-1"
END_OF_STREAM = "@latest"


class PositionError(EventHubsOptionError):
    """An EventPosition option is not valid JSON of the expected shape."""


@dataclass(frozen=True)
class EventPosition:
    """One position in a partition. Exactly one of offset, seq_no or enqueued_time is used."""

    offset: str | None = None
    seq_no: int | None = None
    enqueued_time: datetime.datetime | None = None
    is_inclusive: bool = True

    @classmethod
    def start_of_stream(cls) -> EventPosition:
        """The earliest event still retained."""
        return cls(offset=START_OF_STREAM, is_inclusive=True)

    @classmethod
    def end_of_stream(cls) -> EventPosition:
        """Just after the last event: only events enqueued from now on."""
        return cls(offset=END_OF_STREAM, is_inclusive=False)

    @classmethod
    def from_sequence_number(cls, seq_no: int, inclusive: bool = True) -> EventPosition:
        return cls(seq_no=seq_no, is_inclusive=inclusive)

    @classmethod
    def from_enqueued_time(cls, when: datetime.datetime) -> EventPosition:
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.UTC)
        return cls(enqueued_time=when)

    @property
    def kind(self) -> str:
        """``earliest``, ``latest``, ``offset``, ``seqNo`` or ``enqueuedTime`` (Scala's order)."""
        if self.offset is not None:
            if self.offset == START_OF_STREAM:
                return "earliest"
            if self.offset == END_OF_STREAM:
                return "latest"
            return "offset"
        if self.seq_no is not None and self.seq_no >= 0:
            return "seqNo"
        if self.enqueued_time is not None:
            return "enqueuedTime"
        return "latest"

    def to_json(self) -> str:
        """The Scala connector's JSON form."""
        when = None
        if self.enqueued_time is not None:
            when = self.enqueued_time.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        return json.dumps(
            {
                "offset": self.offset,
                "seqNo": -1 if self.seq_no is None else self.seq_no,
                "enqueuedTime": when,
                "isInclusive": self.is_inclusive,
            }
        )


PositionMap = dict[str, EventPosition]


def _parse_time(option: str, raw: str) -> datetime.datetime:
    text = raw.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        value = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise PositionError(
            f"Option '{option}': enqueuedTime {raw!r} is not an ISO-8601 time such as "
            "2024-01-31T12:00:00.000Z."
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=datetime.UTC)
    return value.astimezone(datetime.UTC)


def position_from_dict(option: str, data: Any) -> EventPosition:
    """Build an EventPosition from its decoded JSON object."""
    if not isinstance(data, dict):
        raise PositionError(
            f"Option '{option}' must be an EventPosition JSON object with keys offset, seqNo, "
            "enqueuedTime, isInclusive."
        )
    unknown = set(data) - {"offset", "seqNo", "enqueuedTime", "isInclusive"}
    if unknown:
        raise PositionError(
            f"Option '{option}' has unknown EventPosition keys {sorted(unknown)}; valid keys are "
            "offset, seqNo, enqueuedTime, isInclusive."
        )
    offset = data.get("offset")
    seq_no = data.get("seqNo")
    when = data.get("enqueuedTime")
    inclusive = data.get("isInclusive", True)
    if not isinstance(inclusive, bool):
        raise PositionError(f"Option '{option}': isInclusive must be true or false.")
    if offset is not None:
        offset = str(offset)
        if offset not in (START_OF_STREAM, END_OF_STREAM) and not offset.isdigit():
            raise PositionError(
                f'Option \'{option}\': offset must be "-1", "@latest" or a number, got {offset!r}.'
            )
        return EventPosition(offset=offset, is_inclusive=inclusive)
    if seq_no is not None and not (isinstance(seq_no, int) and not isinstance(seq_no, bool)):
        raise PositionError(f"Option '{option}': seqNo must be an integer, got {seq_no!r}.")
    if seq_no is not None and seq_no >= 0:
        return EventPosition(seq_no=seq_no, is_inclusive=inclusive)
    if when is not None:
        return EventPosition(enqueued_time=_parse_time(option, str(when)), is_inclusive=inclusive)
    raise PositionError(
        f"Option '{option}' sets none of offset, seqNo (>= 0) or enqueuedTime; set one of them."
    )


def parse_position(option: str, raw: str) -> EventPosition:
    """Parse one EventPosition JSON string (``eventhubs.startingPosition`` and friends)."""
    try:
        data = json.loads(raw)
    except (TypeError, json.JSONDecodeError):
        raise PositionError(f"Option '{option}' is not valid JSON.") from None
    return position_from_dict(option, data)


def position_key(eventhub_name: str, partition_id: str | int) -> str:
    """The JSON string that keys a per-partition map: ``{"ehName": ..., "partitionId": N}``."""
    return json.dumps({"ehName": eventhub_name, "partitionId": int(partition_id)})


def parse_positions(option: str, raw: str, eventhub_name: str) -> PositionMap:
    """Parse a per-partition EventPosition map into ``{partition id: EventPosition}``."""
    try:
        data = json.loads(raw)
    except (TypeError, json.JSONDecodeError):
        raise PositionError(f"Option '{option}' is not valid JSON.") from None
    if not isinstance(data, dict):
        raise PositionError(f"Option '{option}' must be a JSON object of position key -> position.")
    return {
        parse_partition_key(option, key, eventhub_name): position_from_dict(option, value)
        for key, value in data.items()
    }


def parse_partition_key(option: str, key: str, eventhub_name: str) -> str:
    """The partition id of a per-partition map key ``{"ehName": "<hub>", "partitionId": N}``.

    Keys for another event hub name are an error: they would silently never apply.
    """
    try:
        name_and_partition = json.loads(key)
        hub = name_and_partition["ehName"]
        partition = int(name_and_partition["partitionId"])
    except (TypeError, ValueError, KeyError, json.JSONDecodeError):
        raise PositionError(
            f'Option \'{option}\': key {key!r} must be JSON like {{"ehName": "<hub>", "partitionId": 0}}.'
        ) from None
    if hub != eventhub_name:
        raise PositionError(
            f"Option '{option}': key names event hub {hub!r} but this query reads {eventhub_name!r}."
        )
    return str(partition)


@dataclass(frozen=True)
class PartitionBounds:
    """The retained range of one partition: ``[earliest, latest)`` in sequence numbers."""

    partition_id: str
    earliest: int
    latest: int
    last_enqueued_time: datetime.datetime | None = None


def latest_sequence_number(props: Mapping[str, Any]) -> int:
    """Where a caught-up reader of a partition is: its last enqueued sequence number + 1.

    ``props`` is a partition's runtime information as ``azure-eventhub``'s
    ``get_partition_properties`` (or :meth:`~.management.ManagementSession.run`) returns it.
    """
    return int(props["last_enqueued_sequence_number"]) + 1


def partition_bounds(props: Mapping[str, Any]) -> PartitionBounds:
    """The retained range of a partition from its runtime information (see :func:`latest_sequence_number`).

    ``last_enqueued_time_utc`` is in epoch milliseconds, as :class:`~.management.ManagementSession` gives it.
    """
    begin = int(props["beginning_sequence_number"])
    latest = latest_sequence_number(props)
    earliest = latest if props.get("is_empty") else max(0, begin)
    when = None
    if not props.get("is_empty"):
        when = datetime.datetime.fromtimestamp(int(props["last_enqueued_time_utc"]) / 1000, datetime.UTC)
    return PartitionBounds(str(props["id"]), min(earliest, latest), latest, when)
