"""The connector's three long-lived connections used past their first Entra ID token: the fast
receiver, the driver's management session (``HubMetadata``) and the sink's cached producer
(``producer_cache.SinkProducer``, as a worker's tasks borrow it). The emulator detaches a link whose
token lapses, so links that keep working past the first token's expiry were renewed in place. Shared
by the renewal test and the identity tests (a service principal, a workload identity), which differ
only in the credential."""

from __future__ import annotations

import time
from typing import Any

from pyspark_eventhubs.fast_receiver import FastPartitionReceiver
from pyspark_eventhubs.hub_metadata import HubMetadata
from pyspark_eventhubs.options import parse_options
from pyspark_eventhubs.producer_cache import PRODUCERS
from tests.connector.test_entra_id_stream import aad_options

#: The shortest lifetime azure-identity renews in time (30 s between requests; the SDK renews in a
#: token's last 10 %), plus a margin.
LIFETIME = 36


def read_and_write_past_the_first_token(emu: Any, hub: str = "hub1") -> bool:
    """Send, receive and ask for bounds on partition 0 of ``hub`` for LIFETIME + 6 s: every event
    once, in order, the receiver and the sink's producer on their first links throughout. Whether
    the receiver was still on its first connection at the end."""
    from azure.eventhub import EventData

    options = parse_options(aad_options(emu, hub))
    producer = PRODUCERS.borrow(options)
    metadata = HubMetadata(options)
    receiver = FastPartitionReceiver(options, "0", 0, options.prefetch_count)
    received: list[str] = []
    sent: list[str] = []
    try:
        started = time.monotonic()
        first_link = first_connection = first_sender = None
        while time.monotonic() - started < LIFETIME + 6:
            bodies = [f"ev-{len(sent) + i}" for i in range(5)]
            batch = producer.create_batch(partition_id="0")
            for body in bodies:
                batch.add(EventData(body))
            producer.send_batch(batch)
            PRODUCERS.give_back(producer)  # between two tasks: cached, then lent again
            producer = PRODUCERS.borrow(options)
            sent.extend(bodies)
            while len(received) < len(sent):
                rows = receiver.receive(len(sent) - len(received), 30)
                assert rows is not None, f"no events within 30 s after {len(received)}"
                received.extend(bytes(b).decode() for b in rows.column("body").to_pylist())
            sender = producer.client._producers["0"]._handler._link  # the partition's producer link
            if first_link is None:
                first_link, first_connection, first_sender = receiver._link, receiver._conn, sender
            assert sender is first_sender, "the sink's producer link stayed open"
            assert metadata.bounds()["0"].latest == len(sent)
            time.sleep(1)
        assert receiver._link is first_link, "the receiver kept its link"
        same_connection = receiver._conn is first_connection
    finally:
        receiver.close()
        metadata.close()
        PRODUCERS.discard(producer)
    assert received == sent, "every event once, in order"
    return same_connection
