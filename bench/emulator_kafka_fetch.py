"""The emulator's CPU per event on its Kafka Fetch path against its AMQP receive path, in one process.

One hub, ``--partitions`` partitions, ``--events`` events (``--size``-byte body and the 3 application
properties of the other benches, appended in deliveries of ``--batch`` events as an AMQP producer
sends them). Then, timed with ``time.process_time``:

* ``kafka``: a consumer drains every partition with Fetch v12 requests as Spark's Kafka source sends
  them (max 50 MiB, 1 MiB per partition), each request frame decoded, answered and its response
  encoded by the endpoint's own code (``KafkaServer._serve``): what the emulator does per Fetch short
  of the socket write;
* ``amqp``: the same events framed as pre-settled transfers (``frames.transfer_frames``), what the
  AMQP receive path does per event short of the socket write.

Each path is run ``--reps`` times on a newly filled broker; the median CPU µs per event and the
kafka/amqp ratio are printed (before the fast path of commit 0c36ea8 a Kafka drain cost about 38 µs
per event here). ``--profile`` prints cProfile's top functions of one Kafka drain instead.

Usage: ``.venv/bin/python bench/emulator_kafka_fetch.py [--events 200000] [--partitions 4]
[--size 200] [--batch 100] [--reps 3] [--profile]``
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from connector_throughput import PROPERTIES

from eventhubs_emulator import EmulatorConfig
from eventhubs_emulator.codec import Described, encode
from eventhubs_emulator.frames import transfer_frames
from eventhubs_emulator.kafka import handlers
from eventhubs_emulator.kafka.listener import KafkaServer
from eventhubs_emulator.kafka.protocol import ApiKey
from eventhubs_emulator.kafka.records import decode_batches
from eventhubs_emulator.kafka.schemas import SCHEMAS
from eventhubs_emulator.kafka.wire import Reader, Writer, read_struct, write_struct
from eventhubs_emulator.messages import APPLICATION_PROPERTIES, DATA
from eventhubs_emulator.store import Broker

HUB = "bench"
FETCH_VERSION = 12
MAX_BYTES = 50 * 1024 * 1024  # kafka-clients' fetch.max.bytes default
PARTITION_MAX_BYTES = 1024 * 1024  # max.partition.fetch.bytes default


def filled_broker(events: int, partitions: int, size: int, batch: int) -> Broker:
    """A broker whose hub holds ``events`` events spread over its partitions, ``batch`` per delivery."""
    broker = Broker(EmulatorConfig.single_hub(HUB, partition_count=partitions), None)
    hub = broker.hub(HUB)
    assert hub is not None
    message = encode(Described(APPLICATION_PROPERTIES, dict(PROPERTIES))) + encode(
        Described(DATA, b"x" * size)
    )
    for pid, log in hub.partitions.items():
        share = events // partitions + (1 if int(pid) < events % partitions else 0)
        while share > 0:
            n = min(batch, share)
            log.append([message] * n, None)
            share -= n
    return broker


def _fetch_frame(offsets: dict[int, int], correlation_id: int) -> bytes:
    """A Fetch v12 request frame (header and body, no size prefix) for ``offsets`` by partition."""
    w = Writer()
    w.fixed("int16", int(ApiKey.FETCH))
    w.fixed("int16", FETCH_VERSION)
    w.fixed("int32", correlation_id)
    w.string("bench")
    w.empty_tagged_fields()
    request = {
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": MAX_BYTES,
        "topics": [
            {
                "topic": HUB,
                "partitions": [
                    {"partition": p, "fetch_offset": o, "partition_max_bytes": PARTITION_MAX_BYTES}
                    for p, o in offsets.items()
                ],
            }
        ],
    }
    write_struct(w, SCHEMAS[ApiKey.FETCH][0], FETCH_VERSION, True, request)
    return bytes(w.out)


def _record_counts(response: bytes) -> dict[int, int]:
    """How many records each partition's batches in a Fetch v12 response frame hold (CRCs checked)."""
    r = Reader(response, 4)  # correlation id
    r.skip_tagged_fields()
    body = read_struct(r, SCHEMAS[ApiKey.FETCH][1], FETCH_VERSION, True)
    out = {}
    for part in body["responses"][0]["partitions"]:
        data = part["records"] or b""
        if data:
            batches = decode_batches(data)
            out[part["partition_index"]] = sum(len(b) for b in batches)
    return out


def drain_kafka(server: KafkaServer, partitions: int, check: bool = False) -> int:
    """Fetch every partition from offset 0 to its end; the number of fetch requests it took."""
    state = handlers.ClientState(handshake_done=True, authenticated=True)
    offsets = dict.fromkeys(range(partitions), 0)
    ends = {int(p): log.next_seq for p, log in server.broker.hub(HUB).partitions.items()}  # type: ignore[union-attr]
    loop = asyncio.new_event_loop()
    requests = 0
    try:
        while offsets:
            response = loop.run_until_complete(server._serve(_fetch_frame(offsets, requests), state, 0))
            requests += 1
            assert response is not None
            if check:
                for p, n in _record_counts(response).items():
                    offsets[p] += n
            else:  # the records' count from the batch headers, cheaply: last offset + 1 of the last batch
                for p, n in _last_offsets(response).items():
                    offsets[p] = n
            for p in [p for p, o in offsets.items() if o >= ends[p]]:
                del offsets[p]
    finally:
        loop.close()
    return requests


def _last_offsets(response: bytes) -> dict[int, int]:
    """The offset after each partition's last record in a Fetch v12 response frame (batch headers only)."""
    r = Reader(response, 4)
    r.skip_tagged_fields()
    body = read_struct(r, SCHEMAS[ApiKey.FETCH][1], FETCH_VERSION, True)
    out = {}
    for part in body["responses"][0]["partitions"]:
        data = part["records"] or b""
        pos = 0
        last = None
        while pos < len(data):  # base_offset int64, batch_length int32, ..., last_offset_delta at 23
            base = int.from_bytes(data[pos : pos + 8], "big", signed=True)
            length = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
            delta = int.from_bytes(data[pos + 23 : pos + 27], "big", signed=True)
            last = base + delta
            pos += 12 + length
        if last is not None:
            out[part["partition_index"]] = last + 1
    return out


def drain_amqp(broker: Broker) -> int:
    """Frame every event as one pre-settled transfer, as the AMQP receive path does; bytes framed."""
    hub = broker.hub(HUB)
    assert hub is not None
    framed = 0
    for log in hub.partitions.values():
        for seq, _, _, payload, _ in log.events:
            framed += len(transfer_frames(1, 0, seq, seq, payload, 1024 * 1024)[0])
    return framed


def timed(fn, *args) -> float:  # type: ignore[no-untyped-def]
    """CPU seconds ``fn(*args)`` took."""
    started = time.process_time()
    fn(*args)
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--size", type=int, default=200, help="event body size in bytes")
    parser.add_argument("--batch", type=int, default=100, help="events per AMQP delivery when filling")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile one cold Kafka drain")
    args = parser.parse_args()
    broker = filled_broker(args.events, args.partitions, args.size, args.batch)
    server = KafkaServer(broker, "127.0.0.1")
    drain_kafka(server, args.partitions, check=True)  # every event comes back, in order
    if args.profile:
        broker = filled_broker(args.events, args.partitions, args.size, args.batch)
        server = KafkaServer(broker, "127.0.0.1")
        profiler = cProfile.Profile()
        profiler.enable()
        drain_kafka(server, args.partitions)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(18)
        return
    kafka, amqp = [], []
    for _ in range(args.reps):
        broker = filled_broker(args.events, args.partitions, args.size, args.batch)
        kafka.append(
            timed(drain_kafka, KafkaServer(broker, "127.0.0.1"), args.partitions) / args.events * 1e6
        )
        amqp.append(timed(drain_amqp, broker) / args.events * 1e6)
    k, a = statistics.median(kafka), statistics.median(amqp)
    print(
        f"{args.events:,} events ({args.size} B + {len(PROPERTIES)} properties, {args.partitions} "
        f"partitions, {args.batch} per delivery), {args.reps} reps, median CPU µs per event (min-max):\n"
        f"  kafka fetch             {k:6.2f} ({min(kafka):.2f}-{max(kafka):.2f})\n"
        f"  amqp transfer framing   {a:6.2f} ({min(amqp):.2f}-{max(amqp):.2f})\n"
        f"  kafka/amqp              {k / a:6.1f}x"
    )


if __name__ == "__main__":
    main()
