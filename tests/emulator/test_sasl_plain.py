"""SASL PLAIN: the shared access key name and key as user name and password, checked like the service.

The azure-eventhub clients never use PLAIN: they authenticate with SASL ANONYMOUS and then a SAS token
on $cbs (checked in test_errors_and_limits.py). PLAIN is what a client built on AMQP directly uses: here
the pyamqp stack that ships inside azure-eventhub (``SASLPlainAuth``), sync and async. Such a client does
no $cbs put-token, so its links work only because the PLAIN credentials were accepted.
"""

from __future__ import annotations

import asyncio

import pytest
from azure.eventhub._pyamqp import ReceiveClient, SendClient
from azure.eventhub._pyamqp.aio import ReceiveClientAsync, SendClientAsync
from azure.eventhub._pyamqp.authentication import SASLPlainAuth
from azure.eventhub._pyamqp.endpoints import ApacheFilters, Source
from azure.eventhub._pyamqp.message import Message
from azure.eventhub._pyamqp.utils import amqp_string_value

pytestmark = pytest.mark.integration

KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"
FROM_START = b"amqp.annotation.x-opt-offset > '-1'"


def _source(host: str, partition: str) -> Source:
    address = f"amqp://{host}/hub1/ConsumerGroups/$Default/Partitions/{partition}"
    selector = ApacheFilters.selector_filter
    return Source(address=address, filters={selector: (selector, amqp_string_value(FROM_START))})


def _send(host: str, auth: SASLPlainAuth, body: bytes) -> None:
    client = SendClient(host, f"amqp://{host}/hub1/Partitions/0", auth=auth, use_tls=False, retry_total=0)
    try:
        client.open()
        client.send_message(Message(data=[body]))
    finally:
        client.close()


def test_right_key_name_and_key_send_and_receive_without_cbs(emulator):
    host = f"127.0.0.1:{emulator.port}"
    _send(host, SASLPlainAuth(KEY_NAME, KEY), b"plain-1")
    _send(host, SASLPlainAuth(KEY_NAME, KEY, authzid=KEY_NAME), b"plain-2")
    receiver = ReceiveClient(host, _source(host, "0"), auth=SASLPlainAuth(KEY_NAME, KEY), use_tls=False)
    try:
        receiver.open()
        got: list[bytes] = []
        for _ in range(50):
            got += [b"".join(m.data) for m in receiver.receive_message_batch(max_batch_size=10, timeout=1)]
            if len(got) >= 2:
                break
    finally:
        receiver.close()
    assert got == [b"plain-1", b"plain-2"]


@pytest.mark.parametrize(
    ("key_name", "key"),
    [(KEY_NAME, "wrong-key"), ("OtherKeyName", KEY), (KEY_NAME, ""), ("", "")],
)
def test_wrong_credentials_fail_the_connection_with_sasl_auth(emulator, key_name, key):
    host = f"127.0.0.1:{emulator.port}"
    with pytest.raises(ValueError, match=r"SASL negotiation failed\.\nOutcome: 1\n") as failure:
        _send(host, SASLPlainAuth(key_name, key), b"never")
    assert "SharedAccessKeyName" in str(failure.value)
    if key:
        assert key not in str(failure.value)  # the error never echoes the secret it was given
    assert emulator.partition_info("hub1", "0")["retained_events"] == 0
    assert emulator.connection_count() == 0


def test_async_pyamqp_client_with_plain_credentials(emulator):
    host = f"127.0.0.1:{emulator.port}"

    async def send(auth: SASLPlainAuth, body: bytes) -> None:
        client = SendClientAsync(host, f"amqp://{host}/hub1/Partitions/1", auth=auth, use_tls=False)
        try:
            await client.open_async()
            await client.send_message_async(Message(data=[body]))
        finally:
            await client.close_async()

    async def receive() -> list[bytes]:
        auth = SASLPlainAuth(KEY_NAME, KEY)
        client = ReceiveClientAsync(host, _source(host, "1"), auth=auth, use_tls=False)
        got: list[bytes] = []
        try:
            await client.open_async()
            for _ in range(50):
                batch = await client.receive_message_batch_async(max_batch_size=10, timeout=1)
                got += [b"".join(m.data) for m in batch]
                if got:
                    break
        finally:
            await client.close_async()
        return got

    asyncio.run(send(SASLPlainAuth(KEY_NAME, KEY), b"async-plain"))
    with pytest.raises(ValueError, match="Outcome: 1"):
        asyncio.run(send(SASLPlainAuth(KEY_NAME, "nope"), b"never"))
    assert asyncio.run(receive()) == [b"async-plain"]
