"""Parse and validate the options of ``format("eventhubs")`` into one immutable object.

Option names follow azure-event-hubs-spark (case-insensitive), so existing PySpark code moves over
unchanged. Everything is checked here, when Spark creates the data source on the driver, so a bad
option fails the query at start with a message that names the option — never deep inside a task.
Messages name an option as documented (``eventhubs.startingPosition``, not the lower-cased key
Spark hands a Python source: its options map keeps no original spelling). Secrets (the
connection string, a client secret) are kept but never put into any message.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import isodate

from .connection_string import (
    ConnectionStringError,
    EventHubsConnectionString,
)
from .errors import EventHubsOptionError
from .positions import (
    EventPosition,
    PositionMap,
    parse_partition_key,
    parse_position,
    parse_positions,
)

log = logging.getLogger(__name__)

# Every option this connector understands, as documented (matching is case-insensitive).
# Values are a one-line description (used in the "unknown option" message and the docs).
KNOWN_OPTIONS: dict[str, str] = {
    "eventhubs.connectionString": "SAS connection string (plain text); EntityPath or eventhubs.name",
    "eventhubs.name": "event hub name when the connection string has no EntityPath",
    "eventhubs.consumerGroup": "consumer group, default $Default",
    "eventhubs.startingPosition": "EventPosition JSON for every partition",
    "eventhubs.startingPositions": "per-partition EventPosition JSON map",
    "eventhubs.endingPosition": "EventPosition JSON (batch reads)",
    "eventhubs.endingPositions": "per-partition EventPosition JSON map (batch reads)",
    "eventhubs.maxEventsPerTrigger": "alias of maxEventsPerTrigger",
    "eventhubs.maxRatePerPartition": "max events per partition in one micro-batch (every partition)",
    "eventhubs.maxRatesPerPartition": "per-partition JSON map of max events per micro-batch",
    "eventhubs.receiverTimeout": "ISO-8601 duration a task waits for events, default PT60S",
    "eventhubs.operationTimeout": "ISO-8601 duration for management calls, default PT300S",
    "eventhubs.prefetchCount": "receiver prefetch (link credit), 1..4000, default 500",
    "eventhubs.managementRequestsPerSecond": (
        "runtime-information requests per second and namespace, 1..10000, default 50"
    ),
    "eventhubs.useExclusiveReceiver": "epoch (exclusive) receivers, default false",
    "eventhubs.minEventsPerTask": "small ranges share tasks of about this many events (0: off), default 2000",
    "eventhubs.useFastReceiver": "bulk reads straight into Arrow (false: the SDK receive loop), default true",
    "eventhubs.useAadAuth": "true to use Azure AD (azure-identity) instead of a SAS key",
    "eventhubs.fullyQualifiedNamespace": "AAD: namespace host, e.g. myns.servicebus.windows.net",
    "eventhubs.tenantId": "AAD service principal: tenant id",
    "eventhubs.clientId": "AAD service principal: client id",
    "eventhubs.clientSecret": "AAD service principal: client secret",
    "eventhubs.customEndpointAddress": (
        "sb://host[:port] the client connects to instead of the namespace (SDK custom_endpoint_address)"
    ),
    "eventhubs.connectionVerify": "CA bundle (PEM file) trusted for TLS (SDK connection_verify)",
}
NON_PREFIXED_OPTIONS: dict[str, str] = {
    "maxEventsPerTrigger": "max events per micro-batch (default 1000 x partitions), split by backlog",
    "failOnDataLoss": "fail when events expired before they were read, default true",
    "minPartitions": "split partition ranges so a batch has at least this many Spark tasks",
}
# Options of the Scala connector that make no sense here; accepted (with a warning) so that
# existing code keeps working.
IGNORED_SCALA_OPTIONS = [
    "eventhubs.threadPoolSize",
    "eventhubs.maxSilentTime",
    "eventhubs.DynamicPartitionDiscovery",
    "eventhubs.slowPartitionAdjustment",
    "eventhubs.maxAcceptableBatchReceiveTime",
    "eventhubs.throttlingStatusPlugin",
    "eventhubs.metricPlugin",
    "partitionPreferredLocationStrategy",
]
_IGNORED_LOWER = {k.lower() for k in IGNORED_SCALA_OPTIONS}
# The documented spelling of every option by its lower-cased key (what Spark hands a Python source).
OPTION_NAMES: dict[str, str] = {
    k.lower(): k for k in [*KNOWN_OPTIONS, *NON_PREFIXED_OPTIONS, *IGNORED_SCALA_OPTIONS]
}
_KNOWN_LOWER = {k.lower() for k in KNOWN_OPTIONS} | {k.lower() for k in NON_PREFIXED_OPTIONS}


def option_name(key: str) -> str:
    """How the docs (and so, nearly always, the user) spell the option whose key is ``key``."""
    return OPTION_NAMES.get(key.lower(), key)


DEFAULT_CONSUMER_GROUP = "$Default"
DEFAULT_PREFETCH = 500
DEFAULT_RECEIVER_TIMEOUT = datetime.timedelta(seconds=60)
DEFAULT_OPERATION_TIMEOUT = datetime.timedelta(seconds=300)
# maxEventsPerTrigger when unset, per partition of the hub (the Scala connector's default).
DEFAULT_EVENTS_PER_TRIGGER_PER_PARTITION = 1000
# The Scala connector's eventhubs.maxRatePerPartition default, used for the partitions that
# eventhubs.maxRatesPerPartition leaves out when only the map is given.
DEFAULT_MAX_RATE_PER_PARTITION = 1000
# Events a Spark task should read before another task is worth its cost (see offsets.pack_ranges).
DEFAULT_MIN_EVENTS_PER_TASK = 2000
# Runtime-information (management READ) requests per second and namespace: one per partition in
# each planning round, so a 1,024-partition hub plans in about 20 s at the default.
DEFAULT_MANAGEMENT_REQUESTS_PER_SECOND = 50


@dataclass(frozen=True)
class EventHubsOptions:
    """All settings of one reader or writer, validated. ``repr`` never shows a secret."""

    connection_string: str | None = field(repr=False)
    eventhub_name: str
    namespace: str
    consumer_group: str = DEFAULT_CONSUMER_GROUP
    starting_position: EventPosition | None = None
    starting_positions: PositionMap = field(default_factory=dict)
    ending_position: EventPosition | None = None
    ending_positions: PositionMap = field(default_factory=dict)
    max_events_per_trigger: int | None = None
    max_rate_per_partition: int | None = None
    max_rates_per_partition: dict[str, int] = field(default_factory=dict)
    receiver_timeout: float = DEFAULT_RECEIVER_TIMEOUT.total_seconds()
    operation_timeout: float = DEFAULT_OPERATION_TIMEOUT.total_seconds()
    prefetch_count: int = DEFAULT_PREFETCH
    use_exclusive_receiver: bool = False
    use_fast_receiver: bool = True
    fail_on_data_loss: bool = True
    min_partitions: int | None = None
    min_events_per_task: int = DEFAULT_MIN_EVENTS_PER_TASK
    management_requests_per_second: int = DEFAULT_MANAGEMENT_REQUESTS_PER_SECOND
    use_aad_auth: bool = False
    tenant_id: str | None = None
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    custom_endpoint_address: str | None = None
    connection_verify: str | None = None

    @property
    def description(self) -> str:
        """``namespace/hub``: what logs, errors and the Spark UI may show about the hub."""
        return f"{self.namespace}/{self.eventhub_name}"

    def starting_position_for(self, partition_id: str, default: EventPosition | None = None) -> EventPosition:
        """The configured start of one partition; default end of stream (streams, as in Scala)."""
        return self.starting_positions.get(
            partition_id, self.starting_position or default or EventPosition.end_of_stream()
        )

    def ending_position_for(self, partition_id: str) -> EventPosition:
        """The configured end of one partition (batch reads); default is the end of stream."""
        return self.ending_positions.get(partition_id, self.ending_position or EventPosition.end_of_stream())

    def max_events_per_partition(self, partition_id: str) -> int | None:
        """``eventhubs.maxRate(s)PerPartition`` for one partition; None when neither is set.

        As in the Scala connector's DStream: the map's entry, else ``maxRatePerPartition``, else
        1000 — but only once either option is given (the Scala structured stream ignored both).
        """
        if self.max_rate_per_partition is None and not self.max_rates_per_partition:
            return None
        return self.max_rates_per_partition.get(
            partition_id, self.max_rate_per_partition or DEFAULT_MAX_RATE_PER_PARTITION
        )


def _bool(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value in ("true", "false"):
        return value == "true"
    raise EventHubsOptionError(f"Option '{option_name(key)}' must be 'true' or 'false', got {raw!r}.")


def _positive_int(options: Mapping[str, str], key: str, low: int = 1, high: int | None = None) -> int | None:
    raw = options.get(key)
    if raw is None:
        return None
    return _int_value(option_name(key), raw, low, high)


def _min_events_per_task(options: Mapping[str, str]) -> int:
    value = _positive_int(options, "eventhubs.mineventspertask", low=0)
    return DEFAULT_MIN_EVENTS_PER_TASK if value is None else value


def _int_value(name: str, raw: object, low: int = 1, high: int | None = None) -> int:
    if isinstance(raw, bool):
        raise EventHubsOptionError(f"Option '{name}' must be an integer, got {raw!r}.")
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise EventHubsOptionError(f"Option '{name}' must be an integer, got {raw!r}.") from None
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f">= {low}"
        raise EventHubsOptionError(f"Option '{name}' must be {bounds}, got {value}.")
    return value


def parse_iso_duration_option(key: str, raw: str) -> float:
    """Seconds of an ISO-8601 duration option such as ``PT60S`` or ``PT1M30S``: the Scala connector's
    option format, kept for compatibility; hubflow's own config durations ("30 s", "2 min") are
    ``hubflow.durations.parse_duration``."""
    try:
        value = isodate.parse_duration(str(raw).strip())
    except (isodate.ISO8601Error, ValueError):
        raise EventHubsOptionError(
            f"Option '{key}' must be an ISO-8601 duration such as PT60S, got {raw!r}."
        ) from None
    if not isinstance(value, datetime.timedelta):  # years/months have no fixed length
        raise EventHubsOptionError(
            f"Option '{key}' must use days, hours, minutes or seconds (e.g. PT60S), got {raw!r}."
        )
    seconds = value.total_seconds()
    if seconds <= 0:
        raise EventHubsOptionError(f"Option '{key}' must be a positive duration, got {raw!r}.")
    return seconds


def _check_known(options: Mapping[str, str]) -> None:
    for key in options:
        if key in _KNOWN_LOWER:
            continue
        if key in _IGNORED_LOWER:
            log.warning(
                "Option '%s' of azure-event-hubs-spark has no effect here; ignored.", option_name(key)
            )
            continue
        if key.startswith("eventhubs."):
            callbacks = {"eventhubs.aadauthcallback": "eventhubs.aadAuthCallback"}
            callbacks["eventhubs.aadauthcallbackparams"] = "eventhubs.AadAuthCallbackParams"
            if key in callbacks:
                raise EventHubsOptionError(
                    f"Option '{callbacks[key]}' (a JVM callback class) is not supported: set "
                    "eventhubs.useAadAuth=true with eventhubs.tenantId/clientId/clientSecret, or "
                    "without them to use azure-identity's DefaultAzureCredential."
                )
            valid = ", ".join(sorted(KNOWN_OPTIONS) + sorted(NON_PREFIXED_OPTIONS))
            raise EventHubsOptionError(
                f"Unknown option '{key}'. Valid options (case-insensitive) are: {valid}."
            )


def _parse_connection_string(conn: str) -> EventHubsConnectionString:
    """The option's connection string parsed; a malformed one is an option error (value not shown)."""
    try:
        return EventHubsConnectionString.parse(conn)
    except ConnectionStringError:
        raise EventHubsOptionError(
            "Option 'eventhubs.connectionString' is malformed: expected 'Key=Value' pairs "
            "separated by ';' (value not shown)."
        ) from None


def _max_rates(options: Mapping[str, str], eventhub_name: str) -> dict[str, int]:
    """``eventhubs.maxRatesPerPartition``: the Scala JSON map ``{NameAndPartition JSON: rate}``."""
    key = "eventhubs.maxratesperpartition"
    if key not in options:
        return {}
    name = option_name(key)
    try:
        data = json.loads(options[key])
    except (TypeError, json.JSONDecodeError):
        raise EventHubsOptionError(f"Option '{name}' is not valid JSON.") from None
    if not isinstance(data, dict):
        raise EventHubsOptionError(
            f"Option '{name}' must be a JSON object of partition key -> events per batch, keyed "
            "like eventhubs.startingPositions (pyspark_eventhubs.position_key(hub, 0))."
        )
    return {parse_partition_key(name, k, eventhub_name): _int_value(name, v) for k, v in data.items()}


def parse_options(raw: Mapping[str, str]) -> EventHubsOptions:
    """Validate Spark's option map into :class:`EventHubsOptions`; raise EventHubsOptionError."""
    options = {str(k).lower(): v for k, v in raw.items() if v is not None}
    _check_known(options)

    use_aad = _bool(options, "eventhubs.useaadauth", False)
    conn = options.get("eventhubs.connectionstring")
    name = options.get("eventhubs.name")
    namespace = options.get("eventhubs.fullyqualifiednamespace")
    if conn:
        parsed = _parse_connection_string(conn)
        if parsed.namespace is None:
            raise EventHubsOptionError(
                "Option 'eventhubs.connectionString' has no Endpoint=sb://<namespace>/ part."
            )
        namespace = parsed.namespace
        name = name or parsed.entity_path
        if not use_aad and not parsed.has_key:
            raise EventHubsOptionError(
                "Option 'eventhubs.connectionString' has no SharedAccessKey or "
                "SharedAccessSignature; add one, or set eventhubs.useAadAuth=true."
            )
    elif not use_aad:
        raise EventHubsOptionError(
            "Option 'eventhubs.connectionString' is required (or eventhubs.useAadAuth=true with "
            "eventhubs.fullyQualifiedNamespace and eventhubs.name)."
        )
    if use_aad and not namespace:
        raise EventHubsOptionError(
            "Option 'eventhubs.fullyQualifiedNamespace' is required with eventhubs.useAadAuth=true "
            "(or give a connection string without a key)."
        )
    if not name:
        raise EventHubsOptionError(
            "Option 'eventhubs.name' is required when the connection string has no EntityPath."
        )
    sp = [options.get(k) for k in ("eventhubs.tenantid", "eventhubs.clientid")]
    if use_aad and any(sp) and not (all(sp) and options.get("eventhubs.clientsecret")):
        raise EventHubsOptionError(
            "Options 'eventhubs.tenantId', 'eventhubs.clientId' and 'eventhubs.clientSecret' "
            "must be set together (service principal), or none of them (default credential)."
        )

    receiver_timeout = DEFAULT_RECEIVER_TIMEOUT.total_seconds()
    if "eventhubs.receivertimeout" in options:
        receiver_timeout = parse_iso_duration_option(
            "eventhubs.receiverTimeout", options["eventhubs.receivertimeout"]
        )
    operation_timeout = DEFAULT_OPERATION_TIMEOUT.total_seconds()
    if "eventhubs.operationtimeout" in options:
        operation_timeout = parse_iso_duration_option(
            "eventhubs.operationTimeout", options["eventhubs.operationtimeout"]
        )
    if receiver_timeout > operation_timeout:
        raise EventHubsOptionError(
            "Option 'eventhubs.receiverTimeout' must not exceed 'eventhubs.operationTimeout'."
        )

    max_events = _positive_int(options, "maxeventspertrigger")
    if max_events is None:
        max_events = _positive_int(options, "eventhubs.maxeventspertrigger")

    def position(key: str) -> EventPosition | None:
        return parse_position(option_name(key), options[key]) if key in options else None

    def positions(key: str) -> PositionMap:
        return parse_positions(option_name(key), options[key], name) if key in options else {}

    return EventHubsOptions(
        connection_string=conn,
        eventhub_name=name,
        namespace=namespace or "unknown-namespace",
        consumer_group=options.get("eventhubs.consumergroup") or DEFAULT_CONSUMER_GROUP,
        starting_position=position("eventhubs.startingposition"),
        starting_positions=positions("eventhubs.startingpositions"),
        ending_position=position("eventhubs.endingposition"),
        ending_positions=positions("eventhubs.endingpositions"),
        max_events_per_trigger=max_events,
        max_rate_per_partition=_positive_int(options, "eventhubs.maxrateperpartition"),
        max_rates_per_partition=_max_rates(options, name),
        receiver_timeout=receiver_timeout,
        operation_timeout=operation_timeout,
        prefetch_count=_positive_int(options, "eventhubs.prefetchcount", 1, 4000) or DEFAULT_PREFETCH,
        use_exclusive_receiver=_bool(options, "eventhubs.useexclusivereceiver", False),
        use_fast_receiver=_bool(options, "eventhubs.usefastreceiver", True),
        fail_on_data_loss=_bool(options, "failondataloss", True),
        min_partitions=_positive_int(options, "minpartitions"),
        min_events_per_task=_min_events_per_task(options),
        management_requests_per_second=_positive_int(
            options, "eventhubs.managementrequestspersecond", 1, 10_000
        )
        or DEFAULT_MANAGEMENT_REQUESTS_PER_SECOND,
        use_aad_auth=use_aad,
        tenant_id=options.get("eventhubs.tenantid"),
        client_id=options.get("eventhubs.clientid"),
        client_secret=options.get("eventhubs.clientsecret"),
        custom_endpoint_address=_endpoint_address(options),
        connection_verify=_ca_bundle(options),
    )


def _endpoint_address(options: Mapping[str, str]) -> str | None:
    """``eventhubs.customEndpointAddress``: an ``sb://``, ``amqps://`` or ``https://`` host[:port]."""
    raw = options.get("eventhubs.customendpointaddress")
    if raw is None:
        return None
    value = str(raw).strip()
    scheme, sep, rest = value.partition("://")
    host = rest.split("/", 1)[0] if sep else ""
    if scheme.lower() not in ("sb", "amqps", "https", "wss") or not host:
        raise EventHubsOptionError(
            "Option 'eventhubs.customEndpointAddress' must be a URL such as sb://myproxy:5671 "
            f"(scheme sb, amqps, https or wss, then host[:port]), got {raw!r}."
        )
    return value


def _ca_bundle(options: Mapping[str, str]) -> str | None:
    """``eventhubs.connectionVerify``: a PEM file of CA certificates; checked where it is read."""
    raw = options.get("eventhubs.connectionverify")
    if raw is None:
        return None
    value = str(raw).strip()
    if not value:
        raise EventHubsOptionError(
            "Option 'eventhubs.connectionVerify' must be the path of a PEM file of CA certificates."
        )
    return value
