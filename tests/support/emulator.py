"""Start an in-process Event Hubs emulator for tests (connector, jobs, emulator tests).

Example::

    from tests.support.emulator import start_test_emulator

    def test_something(tmp_path):
        with start_test_emulator(tmp_path, hub1=4, consumer_groups=["cg1"]) as emu:
            conn_str = emu.connection_string("hub1")
            ...

The emulator listens on 127.0.0.1 on a free port; it keeps events in memory unless ``persist=True``
(then under ``tmp_path / "eventhubs-data"``, so a second emulator on the same tmp_path sees them).
Starting it is ``eventhubs_emulator.launcher``'s job (shared with bench/ and the demo); this only
maps a test's ``tmp_path`` and keyword hubs onto it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from eventhubs_emulator import Emulator
from eventhubs_emulator.launcher import start_emulator

#: The environment azure-identity (and kafka-clients' login, through hubflow) reads an identity from:
#: a test that sets one clears them all first, so the machine's own cannot leak in.
AZURE_IDENTITY_VARIABLES = (
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_TENANT_ID",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_AUTHORITY_HOST",
    "IDENTITY_ENDPOINT",
    "IDENTITY_HEADER",
    "MSI_ENDPOINT",
    "AZURE_POD_IDENTITY_AUTHORITY_HOST",
    "REQUESTS_CA_BUNDLE",
)


def start_test_emulator(
    tmp_path: Path | None = None,
    *,
    persist: bool = False,
    admin: bool = False,
    consumer_groups: list[str] | None = None,
    retention_event_count: int | None = None,
    retention_minutes: float | None = None,
    **hubs: int,
) -> Emulator:
    """Start an emulator with the given hubs (``name=partition_count``; default ``hub1=2``) and return it.

    The returned Emulator is running; stop it with ``emu.stop()`` or use it in a ``with`` block.
    """
    if not hubs:
        hubs = {"hub1": 2}
    if persist and tmp_path is None:
        raise ValueError("persist=True needs tmp_path (the data directory goes there)")
    data_dir = tmp_path / "eventhubs-data" if persist and tmp_path is not None else None
    return start_emulator(
        hubs,
        data_dir=data_dir,
        admin=admin,
        consumer_groups=consumer_groups,
        retention_event_count=retention_event_count,
        retention_minutes=retention_minutes,
    )


def start_entra_emulator(tmp_path: Path, *, lifetime: float = 3600.0, **hubs: int) -> tuple[Emulator, Any]:
    """An emulator with a TLS port that trusts a local token issuer, and that issuer (started).

    Clients reach it as on Azure: ``custom_endpoint_address=emu.tls_endpoint()``,
    ``connection_verify=str(emu.ca_certificate)``, and azure-identity's managed identity with
    ``issuer.environment()`` in the environment. Stop both (``emu.stop()``, ``issuer.stop()``).
    """
    from eventhubs_emulator import EmulatorConfig
    from eventhubs_emulator.token_issuer import TokenIssuer

    issuer = TokenIssuer(tmp_path / "token-issuer", lifetime=lifetime).start()
    config = EmulatorConfig.many_hubs(
        hubs or {"hub1": 2},
        tls_port=0,
        tls_dir=str(tmp_path / "tls"),
        entra_id_issuer_dir=str(tmp_path / "token-issuer"),
    )
    try:
        return Emulator(config, port=0).start(), issuer
    except BaseException:
        issuer.stop()
        raise


@contextmanager
def managed_identity(spark: Any, environment: dict[str, str], monkeypatch: Any) -> Iterator[None]:
    """The managed-identity variables (``TokenIssuer.environment()``) in the driver and in the Python
    workers of ``format("eventhubs")`` (its registered environment map), as a platform sets them on
    every executor; removed from the map afterwards (``monkeypatch`` restores the driver's)."""
    from pyspark_eventhubs.registration import registered_environment

    shared = registered_environment(spark, "eventhubs")
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
        shared.put(name, value)
    try:
        yield
    finally:
        for name in environment:
            shared.remove(name)
