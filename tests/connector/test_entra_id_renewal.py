"""Token renewal on the connector's three long-lived connections, in one process: the fast receiver
(which takes the socket over from the SDK and calls ``cbs.handle_token()`` itself), the driver's
management session (``HubMetadata``) and a sink producer (``client.producer_client``), all on Entra ID
tokens of ``LIFETIME`` seconds from the local issuer, used for longer than that. The emulator detaches
a link whose token lapses (tests/emulator/test_entra_id.py), so links that keep working past the first
token's expiry, on the same link and connection, were renewed in place.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from pyspark_eventhubs.client import producer_client
from pyspark_eventhubs.fast_receiver import FastPartitionReceiver
from pyspark_eventhubs.hub_metadata import HubMetadata
from pyspark_eventhubs.options import parse_options
from tests.connector.test_entra_id_stream import aad_options
from tests.support.emulator import start_entra_emulator

pytestmark = pytest.mark.integration

#: The shortest lifetime azure-identity renews in time (30 s between requests; the SDK renews in a
#: token's last 10 %), plus a margin.
LIFETIME = 36


class _Detaches(logging.Handler):
    """The emulator's detaches of links whose token expired, by link kind."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.kinds: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "its token expired" in record.getMessage():
            self.kinds.append(str(record.args[0]) if record.args else "?")


def test_the_fast_receiver_management_session_and_sink_renew_their_tokens_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.eventhub import EventData

    emu, issuer = start_entra_emulator(tmp_path, lifetime=LIFETIME, hub1=1)
    for name, value in issuer.environment().items():
        monkeypatch.setenv(name, value)
    detaches = _Detaches()
    emulator_log = logging.getLogger("eventhubs_emulator")
    old_level = emulator_log.level
    emulator_log.setLevel(logging.INFO)
    emulator_log.addHandler(detaches)
    options = parse_options(aad_options(emu, "hub1"))
    producer = producer_client(options)
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
            sent.extend(bodies)
            while len(received) < len(sent):
                rows = receiver.receive(len(sent) - len(received), 30)
                assert rows is not None, f"no events within 30 s after {len(received)}"
                received.extend(bytes(b).decode() for b in rows.column("body").to_pylist())
            sender = producer._producers["0"]._handler._link  # the partition's producer link
            if first_link is None:
                first_link, first_connection, first_sender = receiver._link, receiver._conn, sender
            assert sender is first_sender, "the sink's producer link stayed open"
            assert metadata.bounds()["0"].latest == len(sent)
            time.sleep(1)
        assert receiver._link is first_link and receiver._conn is first_connection, "the same link"
    finally:
        receiver.close()
        metadata.close()
        producer.close()
        emulator_log.removeHandler(detaches)
        emulator_log.setLevel(old_level)
        emu.stop()
        issuer.stop()
    assert received == sent, "every event once, in order"
    # The client's hub-level producer link, opened for create_batch's size limit and idle since, does
    # lapse (and would be reopened on use): the service detaches an idle link as well.
    assert "consumer" not in detaches.kinds, "the receiver's link outlived its token"
    assert detaches.kinds.count("producer") <= 1, f"links detached for an expired token: {detaches.kinds}"
