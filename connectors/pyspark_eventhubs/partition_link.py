"""What both partition receivers share: the cache's bookkeeping of a link and its host-wide slot.

The SDK-path receiver (``receiver_cache.PartitionReceiver``) and the fast receiver
(``fast_receiver.FastPartitionReceiver``) each read one partition from a position. Both hold a
host-wide receiver slot (``receiver_slots``: the service allows 5 receivers per partition and
consumer group) from construction to ``close()``, and keep ``next_seq`` / ``last_used`` /
``idle_since`` for the receiver cache. Runs on executors.
"""

from __future__ import annotations

import time
from typing import Any

from .client import consumer_client
from .options import EventHubsOptions
from .receiver_slots import ReceiverSlot


class PartitionLink:
    """A partition's receiver state and slot, and the consumer client its link is opened on.

    Construction waits up to ``eventhubs.receiverTimeout`` for a slot, then opens the client; if
    that fails the slot is released again. A subclass releases it in its ``close()``.
    """

    def __init__(self, options: EventHubsOptions, partition_id: str, position: Any) -> None:
        self.options = options
        self.partition_id = partition_id
        self.next_seq: int | None = position if isinstance(position, int) else None
        self.last_used = time.monotonic()
        self.idle_since = time.time()
        self.slot = ReceiverSlot.acquire(options, partition_id, options.receiver_timeout)
        try:
            self._client = consumer_client(options)
        except BaseException:
            self.slot.release()
            raise
