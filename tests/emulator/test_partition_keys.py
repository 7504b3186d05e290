"""Partition keys land where the Event Hubs service puts them (lookup3 hash of the key, as in the SDKs).

References used here, none of them the emulator's own code:
- Bob Jenkins' published lookup3 test vectors (``driver5`` in lookup3.c);
- the hash codes pinned by the Azure .NET SDK's ``PartitionResolverTests`` (a port of the service's code);
- the installed Python SDK's own hash (``generate_hash_code``) and its buffered producer, end to end.
"""

from __future__ import annotations

import math
import random
import string
import threading
from collections import defaultdict

import pytest
from azure.eventhub import EventData, EventHubProducerClient
from azure.eventhub._buffered_producer._partition_resolver import generate_hash_code

from eventhubs_emulator.partition_keys import lookup3_pair, partition_index, partition_key_hash

from .conftest import receive_all


def test_lookup3_matches_the_published_test_vectors():
    phrase = b"Four score and seven years ago"
    # (data, primary seed, secondary seed) -> (c, b), from lookup3.c driver5
    assert lookup3_pair(b"", 0, 0) == (0xDEADBEEF, 0xDEADBEEF)
    assert lookup3_pair(b"", 0, 0xDEADBEEF) == (0xBD5B7DDE, 0xDEADBEEF)
    assert lookup3_pair(b"", 0xDEADBEEF, 0xDEADBEEF) == (0x9C093CCD, 0xBD5B7DDE)
    assert lookup3_pair(phrase, 0, 0) == (0x17770551, 0xCE7226E6)
    assert lookup3_pair(phrase, 0, 1) == (0xE3607CAE, 0xBD371DE4)
    assert lookup3_pair(phrase, 1, 0) == (0xCD628161, 0x6CBEA4B3)


@pytest.mark.parametrize(
    ("key", "hash_code"),
    [
        ("7", -15263),
        ("131", 30562),
        ("7149583486996073602", 12977),
        ("FWfAT", -22341),
        ("sOdeEAsyQoEuEFPGerWO", -6503),
        ("!c*_!I@1^c", 15372),
        ("p4*!jioeO/z-!-;w:dh", -3104),
        ("$0cb", 26269),
        ("-4189260826195535198", 453),
    ],
)
def test_hash_codes_are_the_ones_the_azure_sdks_pin(key, hash_code):
    assert partition_key_hash(key) == hash_code


def test_hash_agrees_with_the_python_sdk_for_ascii_keys_and_hashes_utf8_bytes():
    rng = random.Random(12)
    keys = ["", "a", "x" * 12, "y" * 13, "z" * 24, "z" * 25]
    keys += ["".join(rng.choice(string.printable) for _ in range(rng.randint(1, 40))) for _ in range(2000)]
    assert [partition_key_hash(k) for k in keys] == [generate_hash_code(k) for k in keys]
    # Non-ASCII keys: the service (and the .NET SDK) hash the UTF-8 bytes; "é" is the two bytes C3 A9.
    c, b = lookup3_pair("é".encode())
    assert partition_key_hash("é") == ((c ^ b) & 0xFFFF) - (0x10000 if (c ^ b) & 0x8000 else 0)
    assert partition_key_hash("é") != generate_hash_code("é")  # the Python SDK hashes code points


def _service_index(key: str, count: int) -> int:
    """The service's choice from the SDK's hash, with C#'s remainder (sign of the dividend)."""
    return int(abs(math.fmod(generate_hash_code(key), count)))


def test_partition_index_follows_the_service_rule_for_every_partition_count():
    keys = [f"device-{i}" for i in range(500)]
    for count in (1, 2, 3, 4, 5, 7, 8, 16, 32):
        assert [partition_index(k, count) for k in keys] == [_service_index(k, count) for k in keys]


@pytest.mark.integration
def test_send_batch_with_a_key_lands_where_the_buffered_producer_puts_it(emulator):
    """The emulator routes ``send_batch(partition_key=k)`` itself; the buffered producer picks the
    partition client-side and sends to it. Both must put a key on the same partition.

    The Python SDK (5.15) takes Python's modulo of a negative hash (``-5 % 4 == 3``) where the service
    and the .NET/Java SDKs take C#'s remainder (``abs(-5 % 4) == 1``), so for about a quarter of the
    keys on a 4-partition hub the buffered producer strays from the service; the emulator follows the
    service, and this test says which side each key is on.
    """
    conn = emulator.connection_string("hub4")
    ids = ["0", "1", "2", "3"]
    keys = [f"customer-{i}" for i in range(100)]
    picked_by_buffer: dict[str, set[str]] = defaultdict(set)
    failures: list[Exception] = []
    lock = threading.Lock()

    def on_success(events, pid):
        with lock:
            for event in events:
                picked_by_buffer[event.body_as_str().split("|", 1)[1]].add(pid)

    buffered = EventHubProducerClient.from_connection_string(
        conn,
        buffered_mode=True,
        on_success=on_success,
        on_error=lambda events, pid, error: failures.append(error),
        max_wait_time=0.2,
    )
    with buffered:
        for key in keys:
            buffered.send_event(EventData(f"buffered|{key}"), partition_key=key)
        buffered.flush()
    assert failures == []
    with EventHubProducerClient.from_connection_string(conn) as producer:
        for key in keys:
            producer.send_batch([EventData(f"routed|{key}"), EventData(f"routed|{key}")], partition_key=key)

    landed: dict[tuple[str, str], set[str]] = defaultdict(set)
    events = receive_all(conn, expected=3 * len(keys), timeout=120)
    for pid, event in events:
        how, key = event.body_as_str().split("|", 1)
        landed[(how, key)].add(pid)
    assert len(events) == 3 * len(keys), "every event exactly once"

    agree = strays = 0
    for key in keys:
        (routed,) = landed[("routed", key)]  # both events of a key on one partition
        (buffered_pid,) = landed[("buffered", key)]
        assert picked_by_buffer[key] == {buffered_pid}
        assert routed == ids[_service_index(key, 4)], key  # the service's choice
        if generate_hash_code(key) % 4 == _service_index(key, 4):
            assert buffered_pid == routed, key
            agree += 1
        else:  # the Python SDK's modulo of a negative hash
            assert buffered_pid == ids[generate_hash_code(key) % 4] != routed, key
            strays += 1
    assert agree >= 60 and strays >= 1, (agree, strays)
    assert set().union(*(landed[("routed", key)] for key in keys)) == set(ids)
