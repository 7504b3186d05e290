"""One function per Kafka API over the emulator's Broker (the same hubs and partition logs AMQP uses).

Offsets are sequence numbers: a partition's log start offset is its beginning sequence number, its
high watermark the next sequence number. Everything here runs on the emulator's event loop, except
the decoding of large or compressed Produce requests (worker threads; it touches no broker state).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from ..config import KAFKA_GZIP_TIERS
from ..store import Broker, Hub, PartitionLog
from .events import record_tail, record_to_message
from .groups import GroupCoordinator
from .protocol import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_FETCH_WAIT_MS,
    MAX_GROUP_ID_LENGTH,
    MAX_OFFSET_METADATA_BYTES,
    NODE_ID,
    SUPPORTED_VERSIONS,
    ErrorCode,
)
from .records import (
    MAGIC,
    OverBudget,
    RecordBudget,
    TooLarge,
    UnsupportedCompression,
    encode_batch_of_tails,
    has_compressed_batch,
    iter_batches,
    whole_batches,
)
from .wire import KafkaDecodeError


@dataclass
class ClientState:
    """What one client connection has negotiated."""

    handshake_done: bool = False
    authenticated: bool = False
    failed_auth: bool = False  # the connection closes after the failure response
    client_host: str = ""  # as Kafka shows it: "/" and the peer's address
    mechanism: str | None = None  # the SASL mechanism SaslHandshake agreed (a re-authentication keeps it)
    session_expires_at: float | None = None  # epoch seconds; None: no expiry (PLAIN)


@dataclass
class Context:
    """Per-request context: the broker, the address clients reach this endpoint at, the client."""

    broker: Broker
    host: str
    port: int
    state: ClientState
    producer_ids: itertools.count
    # consumer group offsets: (group, hub lower case, partition) -> (offset, metadata)
    committed: dict[tuple[str, str, int], tuple[int, str | None]]
    groups: GroupCoordinator
    client_id: str = ""
    decoder: Executor | None = None  # worker threads for decoding large or compressed Produce requests


def api_versions(ctx: Context, version: int, req: dict) -> dict:
    """The APIs and versions served."""
    keys = [
        {"api_key": int(k), "min_version": lo, "max_version": hi}
        for k, (lo, hi) in SUPPORTED_VERSIONS.items()
    ]
    return {"error_code": ErrorCode.NONE, "api_keys": keys}


def _partition_entries(hub: Hub) -> list[dict]:
    return [
        {
            "error_code": ErrorCode.NONE,
            "partition_index": int(pid),
            "leader_id": NODE_ID,
            "replica_nodes": [NODE_ID],
            "isr_nodes": [NODE_ID],
        }
        for pid in hub.partition_ids()
    ]


def metadata(ctx: Context, version: int, req: dict) -> dict:
    """One broker (this endpoint) leading every partition of the requested hubs (all when none named)."""
    requested = req["topics"]
    if requested is None or (version == 0 and not requested):
        names = [hub.name for hub in ctx.broker.hubs.values()]
    else:
        names = [t["name"] for t in requested]
    topics = []
    for name in names:
        hub = ctx.broker.hub(name or "")
        if hub is None:
            topics.append(
                {"error_code": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "name": name, "partitions": []}
            )
        else:
            topics.append({"error_code": ErrorCode.NONE, "name": name, "partitions": _partition_entries(hub)})
    return {
        "brokers": [{"node_id": NODE_ID, "host": ctx.host, "port": ctx.port, "rack": None}],
        "cluster_id": ctx.broker.config.namespace,
        "controller_id": NODE_ID,
        "topics": topics,
    }


def _log(ctx: Context, topic: str, partition: int) -> PartitionLog | None:
    hub = ctx.broker.hub(topic or "")
    return hub.partitions.get(str(partition)) if hub is not None else None


#: A Produce request whose record sets together hold less than this, none of them compressed, is
#: decoded on the event loop (a thread's round trip would cost more); any other in a worker thread.
INLINE_PRODUCE_BYTES = 64 * 1024


@dataclass
class _ProducePart:
    """One partition entry of a Produce request: what its decoding needs, and then its answer."""

    records: bytes
    log: PartitionLog | None
    max_event_size: int
    answer: dict[str, Any]
    messages: list[bytes] | None = None  # the events to append, once decoded and accepted


def _decode_produce(parts: list[_ProducePart], gzip: bool) -> OverBudget | None:
    """Decode every partition's records into events, within one budget for the request.

    Runs in a worker thread for large or compressed requests: it touches no broker state. Each
    partition's answer gets its refusal, or its ``messages``; past the request's budget, decoding
    stops and the :class:`OverBudget` is returned (the whole request is refused).
    """
    budget = RecordBudget()
    for part in parts:
        if part.log is None:
            continue
        refused = _not_one_batch(part.records)
        if refused is not None:
            part.answer.update(error_code=ErrorCode.INVALID_RECORD, error_message=refused)
            continue
        try:
            part.messages = _decode_partition(part, gzip, budget)
        except OverBudget as exc:
            return exc
        except UnsupportedCompression as exc:
            part.answer.update(_compression_refused(exc.codec, gzip))
        except TooLarge as exc:
            part.answer.update(error_code=ErrorCode.MESSAGE_TOO_LARGE, error_message=str(exc))
        except KafkaDecodeError as exc:
            part.answer.update(error_code=ErrorCode.CORRUPT_MESSAGE, error_message=str(exc))
    return None


def _not_one_batch(data: bytes) -> str | None:
    """Why a partition's record set is not what Produce v3+ carries, as Kafka says it
    (``ProduceRequest.validateRecords``, INVALID_RECORD): exactly one batch, of magic 2; or None."""
    count, magic = whole_batches(data)
    said = "Produce requests with version 3 or later"
    if count == 0:
        return f"{said} must have at least one record batch per partition"
    if magic != MAGIC:
        return f"{said} are only allowed to contain record batches with magic version 2"
    if count > 1:
        return f"{said} are only allowed to contain exactly one record batch per partition"
    return None


def _decode_partition(part: _ProducePart, gzip: bool, budget: RecordBudget) -> list[bytes]:
    """One partition's events; a record is refused as soon as it cannot fit the hub's event size."""
    limit = part.max_event_size
    messages = []
    for batch in iter_batches(part.records, gzip, limit, budget):
        for record in batch:
            message = record_to_message(record)
            if len(message) > limit:
                raise TooLarge(f"an event of {len(message)} bytes exceeds the hub's limit of {limit} bytes")
            messages.append(message)
    return messages


def _compression_refused(codec: str, gzip: bool) -> dict:
    """The service's answer to a compressed batch it does not take (Microsoft's Kafka pages): only
    gzip, and only on Premium and Dedicated (``gzip``); Standard answers with the message-format error."""
    if gzip:
        return {
            "error_code": ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            "error_message": f"{codec} is not supported: Event Hubs takes gzip only; set compression.type "
            "to gzip or none",
        }
    return {
        "error_code": ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
        "error_message": f"a Standard namespace takes no compressed batches ({codec}; Kafka compression is "
        "Premium and Dedicated only, gzip); set compression.type to none",
    }


async def produce(ctx: Context, version: int, req: dict) -> dict | None:
    """Append each partition's records as events (acks 0: no response; 1 and -1 alike: one copy).

    Every partition is decoded before any is appended, within one budget for the request
    (``records.RecordBudget``): a request past it is refused whole with MESSAGE_TOO_LARGE and nothing
    of it is stored. Large or compressed requests are decoded in the server's worker threads, so that
    inflating them does not hold up the other connections.
    """
    acks = req["acks"]
    if acks not in (0, 1, -1):
        responses = [
            {
                "name": t["name"],
                "partition_responses": [
                    {"index": p["index"], "error_code": ErrorCode.INVALID_REQUIRED_ACKS}
                    for p in t["partition_data"]
                ],
            }
            for t in req["topic_data"]
        ]
        return {"responses": responses}
    parts = []
    responses = []  # answered in the request's order, with each partition's answer filled in below
    for t in req["topic_data"]:
        hub = ctx.broker.hub(t["name"] or "")
        limit = ctx.broker.max_event_size(hub) if hub is not None else 0
        answers = []
        for p in t["partition_data"]:
            log = _log(ctx, t["name"], p["index"])
            answer: dict[str, Any] = {
                "index": p["index"],
                "error_code": ErrorCode.NONE,
                "error_message": None,
            }
            if log is None:
                answer["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            answers.append(answer)
            parts.append(_ProducePart(p["records"] or b"", log, limit, answer))
        responses.append({"name": t["name"], "partition_responses": answers})
    gzip = ctx.broker.config.tier in KAFKA_GZIP_TIERS
    inline = sum(len(p.records) for p in parts) < INLINE_PRODUCE_BYTES and not any(
        has_compressed_batch(p.records) for p in parts
    )
    if inline or ctx.decoder is None:
        over = _decode_produce(parts, gzip)
    else:
        over = await asyncio.get_running_loop().run_in_executor(ctx.decoder, _decode_produce, parts, gzip)
    for part in parts:
        if part.log is None:
            continue
        if over is not None:
            part.answer.update(error_code=ErrorCode.MESSAGE_TOO_LARGE, error_message=str(over))
        elif part.messages is not None:
            log = part.log
            base = log.next_seq
            if part.messages:
                log.append(part.messages, None)
            part.answer.update(
                base_offset=base, log_append_time_ms=log.last_enqueued_ms, log_start_offset=log.begin_seq
            )
    return None if acks == 0 else {"responses": responses}


def init_producer_id(ctx: Context, version: int, req: dict) -> dict:
    """A new producer id for an idempotent producer (epoch 0). Transactions are not served; the
    emulator keeps one copy of each accepted batch and does not de-duplicate retried ones."""
    if req["transactional_id"] is not None:
        return {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    return {"error_code": ErrorCode.NONE, "producer_id": next(ctx.producer_ids), "producer_epoch": 0}


def find_coordinator(ctx: Context, version: int, req: dict) -> dict:
    """This endpoint coordinates every consumer group (key type 0); transactions have no coordinator."""
    if req["key_type"] != 0:  # a transactional id: refused as InitProducerId refuses it (no transactions)
        return {
            "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "error_message": "transactions are not served",
            "node_id": -1,
            "host": "",
            "port": -1,
        }
    broker = {"node_id": NODE_ID, "host": ctx.host, "port": ctx.port}
    return {"error_code": ErrorCode.NONE, "error_message": None, **broker}


def offset_commit(ctx: Context, version: int, req: dict) -> dict:
    """Keep a consumer group's committed offsets (in memory; groups are made on first commit), within
    the service's limits on the group id and the metadata.

    A commit outside a generation (-1: a consumer with manual assignment) is always taken; one inside
    needs a member of the group's current, stable generation. Each partition must exist.
    """
    group = req["group_id"]
    allowed = ctx.groups.check_commit(group, req["generation_id"], req["member_id"])
    topics = []
    for t in req["topics"]:
        parts = []
        for p in t["partitions"]:
            error = allowed
            if error != ErrorCode.NONE:
                pass
            elif not group or len(group) > MAX_GROUP_ID_LENGTH:
                error = ErrorCode.INVALID_GROUP_ID
            elif len((p["committed_metadata"] or "").encode("utf-8")) > MAX_OFFSET_METADATA_BYTES:
                error = ErrorCode.OFFSET_METADATA_TOO_LARGE
            elif _log(ctx, t["name"], p["partition_index"]) is None:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                key = (group, t["name"].lower(), p["partition_index"])
                ctx.committed[key] = (p["committed_offset"], p["committed_metadata"])
            parts.append({"partition_index": p["partition_index"], "error_code": error})
        topics.append({"name": t["name"], "partitions": parts})
    return {"topics": topics}


def offset_fetch(ctx: Context, version: int, req: dict) -> dict:
    """A group's committed offsets (-1 where none); every committed partition when no topics are named."""
    group = req["group_id"]
    wanted: list[tuple[str, list[int]]]
    if req["topics"] is None:
        by_topic: dict[str, list[int]] = {}
        for g, hub, partition in ctx.committed:
            if g == group:
                by_topic.setdefault(hub, []).append(partition)
        wanted = sorted(by_topic.items())
    else:
        wanted = [(t["name"], t["partition_indexes"]) for t in req["topics"]]
    topics = []
    for name, partitions in wanted:
        parts = []
        for index in partitions:
            offset, metadata = ctx.committed.get((group, (name or "").lower(), index), (-1, ""))
            error = (
                ErrorCode.NONE if _log(ctx, name, index) is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            parts.append(
                {
                    "partition_index": index,
                    "committed_offset": offset,
                    "metadata": metadata,
                    "error_code": error,
                }
            )
        topics.append({"name": name, "partitions": parts})
    return {"topics": topics, "error_code": ErrorCode.NONE}


async def join_group(ctx: Context, version: int, req: dict) -> dict:
    """JoinGroup: answered when the group's rebalance completes (``groups``)."""
    return await ctx.groups.join(req, ctx.client_id, ctx.state.client_host, version)


async def sync_group(ctx: Context, version: int, req: dict) -> dict:
    """SyncGroup: this member's assignment from the leader."""
    return await ctx.groups.sync(req)


def heartbeat(ctx: Context, version: int, req: dict) -> dict:
    """Heartbeat: the session goes on, or the member must rejoin."""
    return ctx.groups.heartbeat(req)


def leave_group(ctx: Context, version: int, req: dict) -> dict:
    """LeaveGroup: the member goes; the rest rebalance."""
    return ctx.groups.leave(req)


def describe_groups(ctx: Context, version: int, req: dict) -> dict:
    """DescribeGroups: each group's state and members (what kafka-consumer-groups --describe shows)."""
    with_offsets = {group for group, _, _ in ctx.committed}
    return {"groups": [ctx.groups.describe(g, g in with_offsets) for g in req["groups"]]}


def list_groups(ctx: Context, version: int, req: dict) -> dict:
    """ListGroups: every group with members or committed offsets."""
    names = {g for g, group in ctx.groups.groups.items() if group.members} | {g for g, _, _ in ctx.committed}
    listed = [
        {
            "group_id": name,
            "protocol_type": getattr(ctx.groups.groups.get(name), "protocol_type", "") or "consumer",
        }
        for name in sorted(names)
    ]
    return {"error_code": ErrorCode.NONE, "groups": listed}


def list_offsets(ctx: Context, version: int, req: dict) -> dict:
    """Earliest (-2), latest (-1), or the first offset enqueued at or after a timestamp."""
    topics = []
    for t in req["topics"]:
        parts = []
        for p in t["partitions"]:
            entry: dict[str, Any] = {"partition_index": p["partition_index"], "error_code": ErrorCode.NONE}
            log = _log(ctx, t["name"], p["partition_index"])
            ts = p["timestamp"]
            if log is None:
                entry["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif ts == EARLIEST_TIMESTAMP:
                entry.update(offset=log.begin_seq, timestamp=-1)
            elif ts == LATEST_TIMESTAMP:
                entry.update(offset=log.next_seq, timestamp=-1)
            elif ts < 0:
                entry["error_code"] = ErrorCode.INVALID_REQUEST
            else:
                seq = log.first_seq_after_time(ts, inclusive=True)
                if seq >= log.next_seq:
                    entry.update(offset=-1, timestamp=-1)
                else:
                    entry.update(offset=seq, timestamp=log.events[seq - log.begin_seq][2])
            parts.append(entry)
        topics.append({"name": t["name"], "partitions": parts})
    return {"topics": topics}


def _fetch_partition(ctx: Context, topic: str, part: dict, budget: int) -> tuple[dict, int]:
    """One partition's fetch answer and how many record bytes it holds."""
    index = part["partition"]
    out: dict[str, Any] = {"partition_index": index, "error_code": ErrorCode.NONE, "high_watermark": -1}
    log = _log(ctx, topic, index)
    if log is None:
        out["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return out, 0
    out.update(
        high_watermark=log.next_seq,
        last_stable_offset=log.next_seq,
        log_start_offset=log.begin_seq,
        aborted_transactions=None,
    )
    offset = part["fetch_offset"]
    if offset < log.begin_seq or offset > log.next_seq:
        out["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
        return out, 0
    limit = min(part["partition_max_bytes"], budget)
    events = log.events
    chunks: list[bytes] = []
    size = 0
    tails: list[bytes] = []  # the current batch: a run of events with one enqueued time
    run_base = run_ms = offset
    for i in range(offset - log.begin_seq, len(events)):
        seq, _, enq, payload, _ = events[i]
        if size and size + len(payload) > limit:
            break  # the first event goes out even when larger than the limit, as Kafka does
        if tails and run_ms != enq:
            chunks.append(encode_batch_of_tails(run_base, tails, run_ms))
            tails, run_base = [], seq
        run_ms = enq
        tails.append(record_tail(payload))
        size += len(payload)
    if tails:
        chunks.append(encode_batch_of_tails(run_base, tails, run_ms))
    records = b"".join(chunks)
    out["records"] = records
    return out, len(records)


def _fetch_once(ctx: Context, req: dict) -> tuple[dict, int]:
    budget = req["max_bytes"]
    responses = []
    total = 0
    for t in req["topics"]:
        parts = []
        for p in t["partitions"]:
            entry, size = _fetch_partition(ctx, t["topic"], p, max(budget - total, 0))
            total += size
            parts.append(entry)
        responses.append({"topic": t["topic"], "partitions": parts})
    return {"error_code": ErrorCode.NONE, "session_id": 0, "responses": responses}, total


async def fetch(ctx: Context, version: int, req: dict) -> dict:
    """Records from each partition's fetch offset on; waits up to MaxWaitMs for MinBytes to arrive.

    No fetch sessions: every answer is a full one (session id 0), which clients accept.
    """
    response, total = _fetch_once(ctx, req)
    wait_ms = min(max(req["max_wait_ms"], 0), MAX_FETCH_WAIT_MS)
    if total >= max(req["min_bytes"], 1) or wait_ms == 0:
        return response
    arrived = asyncio.Event()
    logs = [
        log
        for t in req["topics"]
        for p in t["partitions"]
        if (log := _log(ctx, t["topic"], p["partition"])) is not None
    ]
    for log in logs:
        log.listeners.add(arrived.set)
    try:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(arrived.wait(), wait_ms / 1000)
    finally:
        for log in logs:
            log.listeners.discard(arrived.set)
    return _fetch_once(ctx, req)[0]
