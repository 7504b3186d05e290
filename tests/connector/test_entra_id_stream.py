"""A Spark stream and an Event Hubs sink on Entra ID, running while their tokens expire.

``format("eventhubs")`` with ``eventhubs.useAadAuth=true`` reads one hub and writes another of the
emulator's TLS port; azure-identity's ``DefaultAzureCredential`` gets every token from the local
issuer's managed-identity endpoint (``IDENTITY_ENDPOINT`` / ``IDENTITY_HEADER``, given to the
source's Python workers as a platform gives them to executors). Tokens live ``LIFETIME`` seconds; the
emulator detaches a link whose token lapses, so the stream only keeps going if the driver's
management session, the executors' cached (fast) receivers and the sink put new tokens in time.
Every event must arrive exactly once, with no link detached for an expired token.

azure-identity asks its endpoint again at most every 30 s (``DEFAULT_TOKEN_REFRESH_RETRY_DELAY``)
and the SDK refreshes in the last 10 % of a token's life, so lifetimes under ~34 s cannot be renewed
in time by any client. Both runs are ``slow`` (68 s with 40 s tokens; 213 s past three lifetimes of
60 s); the default run proves renewal on each connection in-process (test_entra_id_renewal.py).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.connector.conftest import Hub
from tests.support.emulator import managed_identity, start_entra_emulator

pytestmark = pytest.mark.integration

EARLIEST = '{"offset": "-1"}'


class _TokenEvents(logging.Handler):
    """Counts what the emulator logs about tokens: links detached because their token expired, and
    new tokens put on a connection whose consumer / producer links stay open (renewals)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0
        self.renewed: dict[str, int] = {"consumer": 0, "producer": 0}

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "its token expired" in message:
            self.count += 1
        if message.startswith("token renewed for open"):
            for kind in self.renewed:
                self.renewed[kind] += kind in message


def aad_options(emu: Any, hub: str, **extra: str) -> dict[str, str]:
    return {
        "eventhubs.useAadAuth": "true",
        "eventhubs.fullyQualifiedNamespace": "localhost",
        "eventhubs.name": hub,
        "eventhubs.customEndpointAddress": emu.tls_endpoint(),
        "eventhubs.connectionVerify": str(emu.ca_certificate),
        **extra,
    }


def _copy_while_tokens_expire(
    eh_spark: Any, tmp_path: Path, monkeypatch: Any, lifetime: float, run_for: float
) -> None:
    emu, issuer = start_entra_emulator(tmp_path, lifetime=lifetime, src=2, dst=2)
    detaches = _TokenEvents()
    emulator_log = logging.getLogger("eventhubs_emulator")
    old_level = emulator_log.level
    emulator_log.setLevel(logging.INFO)
    emulator_log.addHandler(detaches)
    src = Hub(emu, "src", emu.connection_string("src"))  # the test's own producer uses the SAS key
    sent: list[str] = []
    stop_sending = threading.Event()

    def produce() -> None:
        i = 0
        while not stop_sending.is_set():
            batch = [f"ev-{i + n}" for n in range(20)]
            src.send(batch, partition=str(i // 20 % 2))
            sent.extend(batch)
            i += 20
            stop_sending.wait(0.5)

    query = None
    producer = threading.Thread(target=produce, daemon=True)
    try:
        with managed_identity(eh_spark, issuer.environment(), monkeypatch):
            started = time.monotonic()
            query = (
                eh_spark.readStream.format("eventhubs")
                .options(**aad_options(emu, "src", **{"eventhubs.startingPosition": EARLIEST}))
                .option("maxEventsPerTrigger", "100")
                .load()
                .selectExpr("body", "partition AS partitionKey")
                .writeStream.format("eventhubs")
                .options(**aad_options(emu, "dst"))
                .option("checkpointLocation", str(tmp_path / "ckpt"))
                .trigger(processingTime="1 second")
                .start()
            )
            producer.start()
            # ``run_for`` counts from the query's start, and Spark may take half a minute to open the
            # receivers on a loaded machine: run on (at most one more lifetime) until a cached
            # receiver has renewed its token on its open link, due in its token's last 10 %.
            while time.monotonic() - started < run_for or (
                detaches.renewed["consumer"] == 0 and time.monotonic() - started < run_for + lifetime
            ):
                assert query.exception() is None, f"the stream failed: {query.exception()}"
                assert query.isActive
                time.sleep(1)
            stop_sending.set()
            producer.join(60)
            deadline = time.monotonic() + 180
            while True:
                rows = (
                    eh_spark.read.format("eventhubs")
                    .options(**aad_options(emu, "dst"))
                    .load()
                    .selectExpr("CAST(body AS STRING) AS body")
                    .collect()
                )
                if len(rows) >= len(sent) or time.monotonic() > deadline:
                    break
                assert query.exception() is None, f"the stream failed: {query.exception()}"
                time.sleep(1)
            bodies = [r.body for r in rows]
    finally:
        stop_sending.set()
        if query is not None:
            query.stop()
        emulator_log.removeHandler(detaches)
        emulator_log.setLevel(old_level)
        emu.stop()
        issuer.stop()
    assert sent, "nothing was sent"
    assert len(bodies) == len(sent) and set(bodies) == set(sent), (
        f"{len(sent)} sent, {len(bodies)} copied, {len(set(sent) - set(bodies))} missing, "
        f"{len(bodies) - len(set(bodies))} duplicated"
    )
    lifetimes = (time.monotonic() - started) / lifetime
    assert lifetimes > run_for / lifetime, "the stream outlived its tokens"
    assert issuer.tokens_issued >= 2 * int(run_for / lifetime), "tokens were renewed from the issuer"
    assert detaches.count == 0, f"{detaches.count} links lost their token and were detached"
    assert detaches.renewed["consumer"] >= 1, "a cached receiver renewed its token on its open link"


@pytest.mark.slow
def test_a_stream_and_its_sink_on_entra_id_outlive_their_token(
    eh_spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _copy_while_tokens_expire(eh_spark, tmp_path, monkeypatch, lifetime=40, run_for=50)


@pytest.mark.slow
def test_a_stream_and_its_sink_on_entra_id_run_past_three_token_lifetimes(
    eh_spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _copy_while_tokens_expire(eh_spark, tmp_path, monkeypatch, lifetime=60, run_for=200)
