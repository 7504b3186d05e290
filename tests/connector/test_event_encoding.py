"""The sink's own encoding of an event against the SDK's: the same bytes, the same batch sizes,
the same point where a batch is full; and where the sink must leave the encoding to the SDK."""

from __future__ import annotations

import pytest
from azure.core.settings import settings as azure_settings
from azure.eventhub import EventData, EventDataBatch
from azure.eventhub._common import transform_outbound_single_message
from azure.eventhub._pyamqp.utils import encode_payload
from azure.eventhub._transport._pyamqp_transport import PyamqpTransport
from hypothesis import given, settings
from hypothesis import strategies as st

from pyspark_eventhubs.event_encoding import add_encoded, direct_encoding, encode_event

# Sizes around the one-byte and four-byte widths of AMQP's variable types (255/256).
bodies = st.one_of(
    st.binary(max_size=600),
    st.text(max_size=300),
    st.sampled_from([b"", b"x" * 255, b"x" * 256, b"y" * 70_000, "é" * 128]),
)
properties = st.one_of(
    st.none(),
    st.dictionaries(st.text(min_size=1, max_size=40), st.text(max_size=300), max_size=8),
    # Entries of 254 and 255 bytes (the widest small map, and the narrowest large one), 130 entries.
    st.sampled_from(
        [{"k": "v" * 249}, {"k": "v" * 250}, {f"k{i}": "v" for i in range(130)}, {"big": "v" * 1000}]
    ),
)


def _event(body: bytes | str, props: dict[str, str] | None) -> EventData:
    event = EventData(body)
    if props:
        event.properties = props
    return event


def _sdk_bytes(body: bytes | str, props: dict[str, str] | None) -> bytes:
    outgoing = transform_outbound_single_message(
        _event(body, props), EventData, PyamqpTransport.to_outgoing_amqp_message
    )
    encoded = bytearray()
    encode_payload(encoded, outgoing._message)
    return bytes(encoded)


@settings(max_examples=300, deadline=None)
@given(body=bodies, props=properties)
def test_an_event_is_encoded_as_the_sdk_encodes_it(body: bytes | str, props: dict[str, str] | None) -> None:
    assert encode_event(body, props) == _sdk_bytes(body, props)


@settings(max_examples=100, deadline=None)
@given(
    events=st.lists(st.tuples(bodies, properties), min_size=1, max_size=30),
    max_size=st.integers(min_value=200, max_value=20_000),
)
def test_a_batch_fills_as_the_sdks_batch_fills(
    events: list[tuple[bytes | str, dict[str, str] | None]], max_size: int
) -> None:
    ours, theirs = EventDataBatch(max_size_in_bytes=max_size), EventDataBatch(max_size_in_bytes=max_size)
    for body, props in events:
        taken = add_encoded(ours, encode_event(body, props))
        try:
            theirs.add(_event(body, props))
        except ValueError:
            assert not taken
        else:
            assert taken
        assert (ours.size_in_bytes, len(ours)) == (theirs.size_in_bytes, len(theirs))
    assert [bytes(m) for m in ours._message[5]] == [bytes(m) for m in theirs._message[5]]


def test_partition_key_batches_and_traced_sends_stay_with_the_sdk() -> None:
    assert direct_encoding(EventDataBatch(partition_id="0"))
    assert direct_encoding(EventDataBatch())
    # The SDK stamps a partition key batch's every message with the key.
    assert not direct_encoding(EventDataBatch(partition_key="user-1"))

    class Span:  # any span type configured for azure-core tracing
        pass

    azure_settings.tracing_implementation.set_value(Span)
    try:
        assert not direct_encoding(EventDataBatch())  # the SDK stamps each message with a trace id
    finally:
        azure_settings.tracing_implementation.unset_value()
    assert direct_encoding(EventDataBatch())


@pytest.mark.parametrize("body", ["text", b"\x00\xff"])
def test_encode_event_without_properties_is_one_data_section(body: bytes | str) -> None:
    data = body.encode() if isinstance(body, str) else body
    assert encode_event(body) == b"\x00\x53\x75\xa0" + bytes([len(data)]) + data
