"""Where a new consumer link starts: addresses and the SDK's selector filter.

The SDK sends ``amqp.annotation.x-opt-offset > '<offset>'`` (or sequence-number / enqueued-time, with
``>=`` when inclusive; ``-1`` = start of stream, ``@latest`` = end) as an
``apache.org:selector-filter:string`` filter on the link's source. A link without that filter starts
at the partition's beginning (the earliest retained event), as on the service; a client that wants
only new events sends ``@latest``.
"""

from __future__ import annotations

import re
from typing import Any

from .codec import Described
from .roles import LinkRefused
from .store import PartitionLog

SELECTOR_FILTER = "apache.org:selector-filter:string"
_SELECTOR = re.compile(
    r"amqp\.annotation\.x-opt-(offset|sequence-number|enqueued-time)\s*(>=|>|=)\s*'([^']*)'", re.IGNORECASE
)


def address_of(term: Any) -> str:
    """The path part of a source/target address (scheme and host removed)."""
    if isinstance(term, Described) and isinstance(term.value, list) and term.value:
        raw = term.value[0]
    else:
        raw = None
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if not isinstance(raw, str):
        return ""
    if "://" in raw:
        raw = raw.split("://", 1)[1]
        raw = raw.split("/", 1)[1] if "/" in raw else ""
    return raw.strip("/")


def start_position(log_: PartitionLog, source: Any) -> int:
    """The first sequence number a new consumer link delivers, from its selector filter.

    No filter means the start of the partition (the earliest retained event), as the service does.
    """
    filters = None
    if isinstance(source, Described) and isinstance(source.value, list) and len(source.value) > 7:
        filters = source.value[7]
    expression = None
    if isinstance(filters, dict):
        for key, value in filters.items():
            if str(key) == SELECTOR_FILTER or (
                isinstance(value, Described) and str(value.descriptor) == SELECTOR_FILTER
            ):
                expression = value.value if isinstance(value, Described) else value
    if expression is None:
        return log_.begin_seq  # no position: from the start of the partition, as on the service
    if isinstance(expression, bytes):
        expression = expression.decode("utf-8", "replace")
    match = _SELECTOR.search(str(expression))
    if match is None:
        raise LinkRefused("com.microsoft:argument-error", f"Unsupported selector filter: {expression!r}.")
    field, op, value = match.group(1).lower(), match.group(2), match.group(3)
    inclusive = op in (">=", "=")
    try:
        if field == "offset":
            if value == "-1":
                return log_.begin_seq
            if value == "@latest":
                return log_.next_seq
            return log_.first_seq_after_offset(int(value), inclusive)
        if field == "sequence-number":
            seq = int(value)
            return max(seq if inclusive else seq + 1, log_.begin_seq)
        return log_.first_seq_after_time(int(value), inclusive)
    except ValueError:
        raise LinkRefused(
            "com.microsoft:argument-error", f"The {field} in the selector filter is not a number: {value!r}."
        ) from None
