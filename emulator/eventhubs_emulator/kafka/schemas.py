"""The request and response layouts served, per API and version (transcribed from the Kafka
protocol's message definitions for the versions in ``protocol.SUPPORTED_VERSIONS``), and the request
and response headers."""

from __future__ import annotations

from .protocol import ApiKey
from .wire import Field

_V = 99  # "and every later version"

API_VERSIONS_REQUEST = (
    Field("client_software_name", "string", (3, _V), default=""),
    Field("client_software_version", "string", (3, _V), default=""),
)
API_VERSIONS_RESPONSE = (
    Field("error_code", "int16"),
    Field(
        "api_keys",
        "array",
        fields=(Field("api_key", "int16"), Field("min_version", "int16"), Field("max_version", "int16")),
    ),
    Field("throttle_time_ms", "int32", (1, _V), default=0),
)

SASL_HANDSHAKE_REQUEST = (Field("mechanism", "string"),)
SASL_HANDSHAKE_RESPONSE = (Field("error_code", "int16"), Field("mechanisms", "array", item="string"))

SASL_AUTHENTICATE_REQUEST = (Field("auth_bytes", "bytes"),)
SASL_AUTHENTICATE_RESPONSE = (
    Field("error_code", "int16"),
    Field("error_message", "string", nullable_from=0),
    Field("auth_bytes", "bytes", default=b""),
    Field("session_lifetime_ms", "int64", (1, _V), default=0),
)

METADATA_REQUEST = (
    Field("topics", "array", nullable_from=1, fields=(Field("name", "string"),)),
    Field("allow_auto_topic_creation", "bool", (4, _V), default=True),
    Field("include_cluster_authorized_operations", "bool", (8, 10), default=False),
    Field("include_topic_authorized_operations", "bool", (8, _V), default=False),
)
METADATA_RESPONSE = (
    Field("throttle_time_ms", "int32", (3, _V), default=0),
    Field(
        "brokers",
        "array",
        fields=(
            Field("node_id", "int32"),
            Field("host", "string"),
            Field("port", "int32"),
            Field("rack", "string", (1, _V), nullable_from=1),
        ),
    ),
    Field("cluster_id", "string", (2, _V), nullable_from=2),
    Field("controller_id", "int32", (1, _V), default=-1),
    Field(
        "topics",
        "array",
        fields=(
            Field("error_code", "int16"),
            Field("name", "string"),
            Field("is_internal", "bool", (1, _V), default=False),
            Field(
                "partitions",
                "array",
                fields=(
                    Field("error_code", "int16"),
                    Field("partition_index", "int32"),
                    Field("leader_id", "int32"),
                    Field("leader_epoch", "int32", (7, _V), default=0),
                    Field("replica_nodes", "array", item="int32"),
                    Field("isr_nodes", "array", item="int32"),
                    Field("offline_replicas", "array", (5, _V), item="int32", default=[]),
                ),
            ),
            Field("topic_authorized_operations", "int32", (8, _V), default=-2147483648),
        ),
    ),
    Field("cluster_authorized_operations", "int32", (8, 10), default=-2147483648),
)

PRODUCE_REQUEST = (
    Field("transactional_id", "string", (3, _V), nullable_from=3),
    Field("acks", "int16"),
    Field("timeout_ms", "int32"),
    Field(
        "topic_data",
        "array",
        fields=(
            Field("name", "string"),
            Field(
                "partition_data",
                "array",
                fields=(Field("index", "int32"), Field("records", "records", nullable_from=0)),
            ),
        ),
    ),
)
PRODUCE_RESPONSE = (
    Field(
        "responses",
        "array",
        fields=(
            Field("name", "string"),
            Field(
                "partition_responses",
                "array",
                fields=(
                    Field("index", "int32"),
                    Field("error_code", "int16"),
                    Field("base_offset", "int64", default=-1),
                    Field("log_append_time_ms", "int64", (2, _V), default=-1),
                    Field("log_start_offset", "int64", (5, _V), default=-1),
                    Field(
                        "record_errors",
                        "array",
                        (8, _V),
                        default=[],
                        fields=(
                            Field("batch_index", "int32"),
                            Field("batch_index_error_message", "string", nullable_from=8),
                        ),
                    ),
                    Field("error_message", "string", (8, _V), nullable_from=8),
                ),
            ),
        ),
    ),
    Field("throttle_time_ms", "int32", (1, _V), default=0),
)

FETCH_REQUEST = (
    Field("replica_id", "int32", (0, 14), default=-1),
    Field("max_wait_ms", "int32"),
    Field("min_bytes", "int32"),
    Field("max_bytes", "int32", (3, _V), default=0x7FFFFFFF),
    Field("isolation_level", "int8", (4, _V), default=0),
    Field("session_id", "int32", (7, _V), default=0),
    Field("session_epoch", "int32", (7, _V), default=-1),
    Field(
        "topics",
        "array",
        fields=(
            Field("topic", "string"),
            Field(
                "partitions",
                "array",
                fields=(
                    Field("partition", "int32"),
                    Field("current_leader_epoch", "int32", (9, _V), default=-1),
                    Field("fetch_offset", "int64"),
                    Field("last_fetched_epoch", "int32", (12, _V), default=-1),
                    Field("log_start_offset", "int64", (5, _V), default=-1),
                    Field("partition_max_bytes", "int32"),
                ),
            ),
        ),
    ),
    Field(
        "forgotten_topics_data",
        "array",
        (7, _V),
        default=[],
        fields=(Field("topic", "string"), Field("partitions", "array", item="int32")),
    ),
    Field("rack_id", "string", (11, _V), default=""),
)
FETCH_RESPONSE = (
    Field("throttle_time_ms", "int32", (1, _V), default=0),
    Field("error_code", "int16", (7, _V), default=0),
    Field("session_id", "int32", (7, _V), default=0),
    Field(
        "responses",
        "array",
        fields=(
            Field("topic", "string"),
            Field(
                "partitions",
                "array",
                fields=(
                    Field("partition_index", "int32"),
                    Field("error_code", "int16"),
                    Field("high_watermark", "int64"),
                    Field("last_stable_offset", "int64", (4, _V), default=-1),
                    Field("log_start_offset", "int64", (5, _V), default=-1),
                    Field(
                        "aborted_transactions",
                        "array",
                        (4, _V),
                        nullable_from=4,
                        fields=(Field("producer_id", "int64"), Field("first_offset", "int64")),
                    ),
                    Field("preferred_read_replica", "int32", (11, _V), default=-1),
                    Field("records", "records", nullable_from=0),
                ),
            ),
        ),
    ),
)

INIT_PRODUCER_ID_REQUEST = (
    Field("transactional_id", "string", nullable_from=0),
    Field("transaction_timeout_ms", "int32"),
    Field("producer_id", "int64", (3, _V), default=-1),
    Field("producer_epoch", "int16", (3, _V), default=-1),
)
INIT_PRODUCER_ID_RESPONSE = (
    Field("throttle_time_ms", "int32", default=0),
    Field("error_code", "int16"),
    Field("producer_id", "int64", default=-1),
    Field("producer_epoch", "int16", default=-1),
)

FIND_COORDINATOR_REQUEST = (
    Field("key", "string"),
    Field("key_type", "int8", (1, _V), default=0),
)
FIND_COORDINATOR_RESPONSE = (
    Field("throttle_time_ms", "int32", (1, _V), default=0),
    Field("error_code", "int16"),
    Field("error_message", "string", (1, _V), nullable_from=1),
    Field("node_id", "int32"),
    Field("host", "string"),
    Field("port", "int32"),
)

JOIN_GROUP_REQUEST = (
    Field("group_id", "string"),
    Field("session_timeout_ms", "int32"),
    Field("rebalance_timeout_ms", "int32", (1, _V), default=-1),
    Field("member_id", "string"),
    Field("group_instance_id", "string", (5, _V), nullable_from=5),
    Field("protocol_type", "string"),
    Field("protocols", "array", fields=(Field("name", "string"), Field("metadata", "bytes"))),
)
JOIN_GROUP_RESPONSE = (
    Field("throttle_time_ms", "int32", (2, _V), default=0),
    Field("error_code", "int16"),
    Field("generation_id", "int32", default=-1),
    Field("protocol_name", "string", default=""),
    Field("leader", "string", default=""),
    Field("member_id", "string", default=""),
    Field(
        "members",
        "array",
        fields=(
            Field("member_id", "string"),
            Field("group_instance_id", "string", (5, _V), nullable_from=5),
            Field("metadata", "bytes"),
        ),
    ),
)

SYNC_GROUP_REQUEST = (
    Field("group_id", "string"),
    Field("generation_id", "int32"),
    Field("member_id", "string"),
    Field("group_instance_id", "string", (3, _V), nullable_from=3),
    Field("assignments", "array", fields=(Field("member_id", "string"), Field("assignment", "bytes"))),
)
SYNC_GROUP_RESPONSE = (
    Field("throttle_time_ms", "int32", (1, _V), default=0),
    Field("error_code", "int16"),
    Field("assignment", "bytes", default=b""),
)

HEARTBEAT_REQUEST = (
    Field("group_id", "string"),
    Field("generation_id", "int32"),
    Field("member_id", "string"),
    Field("group_instance_id", "string", (3, _V), nullable_from=3),
)
HEARTBEAT_RESPONSE = (Field("throttle_time_ms", "int32", (1, _V), default=0), Field("error_code", "int16"))

LEAVE_GROUP_REQUEST = (Field("group_id", "string"), Field("member_id", "string", (0, 2)))
LEAVE_GROUP_RESPONSE = (Field("throttle_time_ms", "int32", (1, _V), default=0), Field("error_code", "int16"))

DESCRIBE_GROUPS_REQUEST = (
    Field("groups", "array", item="string"),
    Field("include_authorized_operations", "bool", (3, _V), default=False),
)
DESCRIBE_GROUPS_RESPONSE = (
    Field("throttle_time_ms", "int32", (1, _V), default=0),
    Field(
        "groups",
        "array",
        fields=(
            Field("error_code", "int16"),
            Field("group_id", "string"),
            Field("group_state", "string"),
            Field("protocol_type", "string"),
            Field("protocol_data", "string"),
            Field(
                "members",
                "array",
                fields=(
                    Field("member_id", "string"),
                    Field("group_instance_id", "string", (4, _V), nullable_from=4),
                    Field("client_id", "string"),
                    Field("client_host", "string"),
                    Field("member_metadata", "bytes"),
                    Field("member_assignment", "bytes"),
                ),
            ),
            Field("authorized_operations", "int32", (3, _V), default=-2147483648),
        ),
    ),
)

LIST_GROUPS_REQUEST: tuple[Field, ...] = ()
LIST_GROUPS_RESPONSE = (
    Field("throttle_time_ms", "int32", (1, _V), default=0),
    Field("error_code", "int16"),
    Field("groups", "array", fields=(Field("group_id", "string"), Field("protocol_type", "string"))),
)

OFFSET_COMMIT_REQUEST = (
    Field("group_id", "string"),
    Field("generation_id", "int32", (1, _V), default=-1),
    Field("member_id", "string", (1, _V), default=""),
    Field("group_instance_id", "string", (7, _V), nullable_from=7),
    Field("retention_time_ms", "int64", (2, 4), default=-1),
    Field(
        "topics",
        "array",
        fields=(
            Field("name", "string"),
            Field(
                "partitions",
                "array",
                fields=(
                    Field("partition_index", "int32"),
                    Field("committed_offset", "int64"),
                    Field("committed_leader_epoch", "int32", (6, _V), default=-1),
                    Field("committed_metadata", "string", nullable_from=0),
                ),
            ),
        ),
    ),
)
OFFSET_COMMIT_RESPONSE = (
    Field("throttle_time_ms", "int32", (3, _V), default=0),
    Field(
        "topics",
        "array",
        fields=(
            Field("name", "string"),
            Field(
                "partitions",
                "array",
                fields=(Field("partition_index", "int32"), Field("error_code", "int16")),
            ),
        ),
    ),
)

OFFSET_FETCH_REQUEST = (
    Field("group_id", "string"),
    Field(
        "topics",
        "array",
        nullable_from=2,
        fields=(Field("name", "string"), Field("partition_indexes", "array", item="int32")),
    ),
    Field("require_stable", "bool", (7, _V), default=False),
)
OFFSET_FETCH_RESPONSE = (
    Field("throttle_time_ms", "int32", (3, _V), default=0),
    Field(
        "topics",
        "array",
        fields=(
            Field("name", "string"),
            Field(
                "partitions",
                "array",
                fields=(
                    Field("partition_index", "int32"),
                    Field("committed_offset", "int64", default=-1),
                    Field("committed_leader_epoch", "int32", (5, _V), default=-1),
                    Field("metadata", "string", nullable_from=0),
                    Field("error_code", "int16"),
                ),
            ),
        ),
    ),
    Field("error_code", "int16", (2, _V), default=0),
)

LIST_OFFSETS_REQUEST = (
    Field("replica_id", "int32"),
    Field("isolation_level", "int8", (2, _V), default=0),
    Field(
        "topics",
        "array",
        fields=(
            Field("name", "string"),
            Field(
                "partitions",
                "array",
                fields=(
                    Field("partition_index", "int32"),
                    Field("current_leader_epoch", "int32", (4, _V), default=-1),
                    Field("timestamp", "int64"),
                ),
            ),
        ),
    ),
)
LIST_OFFSETS_RESPONSE = (
    Field("throttle_time_ms", "int32", (2, _V), default=0),
    Field(
        "topics",
        "array",
        fields=(
            Field("name", "string"),
            Field(
                "partitions",
                "array",
                fields=(
                    Field("partition_index", "int32"),
                    Field("error_code", "int16"),
                    Field("timestamp", "int64", default=-1),
                    Field("offset", "int64", default=-1),
                    Field("leader_epoch", "int32", (4, _V), default=0),
                ),
            ),
        ),
    ),
)

#: (request schema, response schema) per API.
SCHEMAS: dict[ApiKey, tuple[tuple[Field, ...], tuple[Field, ...]]] = {
    ApiKey.API_VERSIONS: (API_VERSIONS_REQUEST, API_VERSIONS_RESPONSE),
    ApiKey.SASL_HANDSHAKE: (SASL_HANDSHAKE_REQUEST, SASL_HANDSHAKE_RESPONSE),
    ApiKey.SASL_AUTHENTICATE: (SASL_AUTHENTICATE_REQUEST, SASL_AUTHENTICATE_RESPONSE),
    ApiKey.METADATA: (METADATA_REQUEST, METADATA_RESPONSE),
    ApiKey.PRODUCE: (PRODUCE_REQUEST, PRODUCE_RESPONSE),
    ApiKey.FETCH: (FETCH_REQUEST, FETCH_RESPONSE),
    ApiKey.LIST_OFFSETS: (LIST_OFFSETS_REQUEST, LIST_OFFSETS_RESPONSE),
    ApiKey.INIT_PRODUCER_ID: (INIT_PRODUCER_ID_REQUEST, INIT_PRODUCER_ID_RESPONSE),
    ApiKey.FIND_COORDINATOR: (FIND_COORDINATOR_REQUEST, FIND_COORDINATOR_RESPONSE),
    ApiKey.JOIN_GROUP: (JOIN_GROUP_REQUEST, JOIN_GROUP_RESPONSE),
    ApiKey.SYNC_GROUP: (SYNC_GROUP_REQUEST, SYNC_GROUP_RESPONSE),
    ApiKey.HEARTBEAT: (HEARTBEAT_REQUEST, HEARTBEAT_RESPONSE),
    ApiKey.LEAVE_GROUP: (LEAVE_GROUP_REQUEST, LEAVE_GROUP_RESPONSE),
    ApiKey.DESCRIBE_GROUPS: (DESCRIBE_GROUPS_REQUEST, DESCRIBE_GROUPS_RESPONSE),
    ApiKey.LIST_GROUPS: (LIST_GROUPS_REQUEST, LIST_GROUPS_RESPONSE),
    ApiKey.OFFSET_COMMIT: (OFFSET_COMMIT_REQUEST, OFFSET_COMMIT_RESPONSE),
    ApiKey.OFFSET_FETCH: (OFFSET_FETCH_REQUEST, OFFSET_FETCH_RESPONSE),
}
