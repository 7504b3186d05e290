"""Kafka protocol constants the endpoint uses, defined once: API keys, served versions, error codes,
limits."""

from __future__ import annotations

from enum import IntEnum


class ApiKey(IntEnum):
    """The request types served (Kafka's api_key numbers)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    INIT_PRODUCER_ID = 22
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    SASL_AUTHENTICATE = 36


#: Versions served per API, (min, max). Flexible versions (compact encodings, tagged fields) start at
#: FLEXIBLE_FROM; the ranges stop before versions that change semantics the emulator lacks (topic ids).
SUPPORTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 9),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 6),
    ApiKey.METADATA: (0, 9),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.OFFSET_COMMIT: (2, 8),
    ApiKey.OFFSET_FETCH: (1, 7),
    ApiKey.FIND_COORDINATOR: (0, 3),
    ApiKey.JOIN_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 3),
    ApiKey.LEAVE_GROUP: (0, 2),
    ApiKey.SYNC_GROUP: (0, 3),
    ApiKey.DESCRIBE_GROUPS: (0, 4),
    ApiKey.LIST_GROUPS: (0, 2),
    ApiKey.SASL_HANDSHAKE: (1, 1),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
}

#: The first flexible version of each API (None: never flexible).
FLEXIBLE_FROM: dict[ApiKey, int | None] = {
    ApiKey.PRODUCE: 9,
    ApiKey.FETCH: 12,
    ApiKey.LIST_OFFSETS: 6,
    ApiKey.METADATA: 9,
    ApiKey.INIT_PRODUCER_ID: 2,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 6,
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 6,
    ApiKey.HEARTBEAT: 4,
    ApiKey.LEAVE_GROUP: 4,
    ApiKey.SYNC_GROUP: 4,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 3,
    ApiKey.SASL_HANDSHAKE: None,
    ApiKey.API_VERSIONS: 3,
    ApiKey.SASL_AUTHENTICATE: 2,
}

#: APIs a client may call before it has authenticated.
PRE_AUTH_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})


class ErrorCode(IntEnum):
    """Kafka error codes the endpoint answers with."""

    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    REBALANCE_IN_PROGRESS = 27
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SASL_AUTHENTICATION_FAILED = 58
    UNSUPPORTED_COMPRESSION_TYPE = 76
    MEMBER_ID_REQUIRED = 79
    INVALID_RECORD = 87


#: The SASL PLAIN user name the service takes (the password is a connection string).
SASL_USER = "$ConnectionString"

#: The one broker (node id) the endpoint presents; it leads every partition.
NODE_ID = 0

#: Largest request accepted from a client that has not authenticated yet (as Kafka's 512 KiB), and
#: from one that has (above the service's 1 MB request limit, with room for the frame); a larger size
#: prefix closes the connection before anything is read.
MAX_UNAUTHENTICATED_REQUEST_BYTES = 512 * 1024
MAX_REQUEST_BYTES = 8 * 1024 * 1024

#: How long the answer to a failed SASL exchange is held back before it is sent and the connection
#: closed, as Kafka's ``connection.failed.authentication.delay.ms`` (default 100; Apache Kafka 4.1
#: answers a wrong password after 100-300 ms, then closes): it slows password guessing.
FAILED_AUTHENTICATION_DELAY = 0.1

#: How long the first rebalance of an empty consumer group waits for more members (extended by as much
#: per member joining meanwhile, up to the rebalance timeout): Kafka's group.initial.rebalance.delay.ms
#: default. Without it, members that start together each trigger a rebalance of their own.
GROUP_INITIAL_REBALANCE_DELAY = 3.0

#: The service's limits that Kafka does not have (Microsoft's Kafka troubleshooting guide, "Limits"):
#: a ``group.id`` of at most 256 characters, offset commit metadata of at most 1,024 bytes.
MAX_GROUP_ID_LENGTH = 256
MAX_OFFSET_METADATA_BYTES = 1024

#: Longest a Fetch waits for data (its MaxWaitMs is capped to this).
MAX_FETCH_WAIT_MS = 30_000

#: ListOffsets timestamps with a special meaning.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
