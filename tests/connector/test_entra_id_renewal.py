"""Token renewal on the connector's three long-lived connections, in one process: the fast receiver
(which takes the socket over from the SDK and calls ``cbs.handle_token()`` itself), the driver's
management session (``HubMetadata``) and a sink producer (``client.producer_client``), all on Entra ID
tokens of ``LIFETIME`` seconds from the local issuer, used for longer than that. The emulator detaches
a link whose token lapses (tests/emulator/test_entra_id.py), so links that keep working past the first
token's expiry, on the same link and connection, were renewed in place.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.connector.token_renewal import LIFETIME, read_and_write_past_the_first_token
from tests.support.emulator import start_entra_emulator

pytestmark = pytest.mark.integration


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
    # The client's hub-level producer link, opened for create_batch's size limit and idle since, does
    # lapse (and would be reopened on use): the service detaches an idle link as well.
    assert "consumer" not in detaches.kinds, "the receiver's link outlived its token"
    assert detaches.kinds.count("producer") <= 1, f"links detached for an expired token: {detaches.kinds}"
