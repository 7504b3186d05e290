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

from pyspark_eventhubs.options import parse_options
from pyspark_eventhubs.producer_cache import PRODUCERS
from pyspark_eventhubs.writer import SinkColumns, _write_rows
from tests.connector.conftest import producer_links
from tests.connector.test_entra_id_stream import aad_options
from tests.connector.token_renewal import LIFETIME, read_and_write_past_the_first_token
from tests.support.emulator import start_entra_emulator

pytestmark = pytest.mark.integration


class _Detaches(logging.Handler):
    """The emulator's detaches of links whose token expired, by link kind, and its renewals."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.kinds: list[str] = []
        self.renewed: list[str] = []  # the emulator's "token renewed for open ... links" lines

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "its token expired" in message:
            self.kinds.append(str(record.args[0]) if record.args else "?")
        if message.startswith("token renewed for open"):
            self.renewed.append(message)


def test_the_fast_receiver_management_session_and_sink_renew_their_tokens_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    emu, issuer = start_entra_emulator(tmp_path, lifetime=LIFETIME, hub1=1)
    for name, value in issuer.environment().items():
        monkeypatch.setenv(name, value)
    detaches = _Detaches()
    emulator_log = logging.getLogger("eventhubs_emulator")
    old_level = emulator_log.level
    emulator_log.setLevel(logging.INFO)
    emulator_log.addHandler(detaches)
    try:
        same_connection = read_and_write_past_the_first_token(emu)
    finally:
        emulator_log.removeHandler(detaches)
        emulator_log.setLevel(old_level)
        emu.stop()
        issuer.stop()
    assert same_connection, "the receiver kept its connection"
    # The sink's producer opens only the links it sends on (create_batch takes the size limit from
    # the partition's own link), so no idle hub-level link is left to lapse.
    assert "consumer" not in detaches.kinds, "the receiver's link outlived its token"
    assert "producer" not in detaches.kinds, f"links detached for an expired token: {detaches.kinds}"


def test_a_cached_sink_producer_renews_its_token_while_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's cached producer that no task borrows while its Entra ID token runs out: the idle
    timer puts a new token on its open link in the token's last 10 %, so the next task sends on the
    same link (the emulator would have detached it at expiry) and no producer is rebuilt."""
    emu, issuer = start_entra_emulator(tmp_path, lifetime=LIFETIME, hub1=1)
    for name, value in issuer.environment().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(PRODUCERS, "idle_seconds", 3 * LIFETIME)  # cached through a token's life
    detaches = _Detaches()
    emulator_log = logging.getLogger("eventhubs_emulator")
    old_level = emulator_log.level
    emulator_log.setLevel(logging.INFO)
    emulator_log.addHandler(detaches)
    columns = SinkColumns(body="body", partition_key=None, partition_id="pid", properties=None)
    try:
        options = parse_options(aad_options(emu, "hub1"))
        opened, reused, dropped = PRODUCERS.opened, PRODUCERS.reused, PRODUCERS.dropped
        _write_rows(options, columns, iter([{"body": "before", "pid": "0"}]))
        links = producer_links(emu, "hub1")
        time.sleep(LIFETIME + 6)  # no task: only the timer touches the producer
        _write_rows(options, columns, iter([{"body": "after", "pid": "0"}]))
        after = producer_links(emu, "hub1")
        counters = (PRODUCERS.opened - opened, PRODUCERS.reused - reused, PRODUCERS.dropped - dropped)
    finally:
        PRODUCERS.close_all()
        emulator_log.removeHandler(detaches)
        emulator_log.setLevel(old_level)
        emu.stop()
        issuer.stop()
    assert len(links) == 1 and after == {name: 2 for name in links}, "both sends on the first link"
    assert counters == (1, 1, 0), "one producer, lent twice, never rebuilt"
    assert detaches.kinds == [], f"links detached for an expired token: {detaches.kinds}"
    assert any("producer" in line for line in detaches.renewed), "renewed on the open link"
    assert issuer.tokens_issued >= 2
