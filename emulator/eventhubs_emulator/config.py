"""Emulator configuration: the official emulator's Config.json plus a few optional extras.

Official shape (Microsoft's emulator reads the same file)::

    {"UserConfig": {"NamespaceConfig": [{"Type": "EventHub", "Name": "emulatorNs1",
       "Entities": [{"Name": "eh1", "PartitionCount": 2, "ConsumerGroups": [{"Name": "cg1"}]}]}],
     "LoggingConfig": {"Type": "File"}}}

Extras this emulator understands (the official one ignores unknown fields):

- ``UserConfig.EmulatorExtras``: ``SharedAccessKeyName``, ``SharedAccessKey``, ``MaxEventSizeBytes``,
  ``RetentionMinutes``, ``RetentionEventCount`` (namespace-wide defaults), ``MaxReceiversPerPartition``
  (receivers without owner level per partition and consumer group; default 5 like the service, 0 = no
  limit), ``WebSocketPort`` (an extra port for AMQP over WebSockets; 0 = a free port; the AMQP port
  serves WebSockets too), ``TlsPort`` (an extra port for AMQPS and WSS; 0 = a free port) and
  ``TlsDir`` (its CA and certificate, made there on first use; ``eventhubs_emulator.tls``),
  ``KafkaPort`` (the Kafka endpoint, SASL PLAIN with the connection string; 0 = a free port;
  ``eventhubs_emulator.kafka``), ``KafkaTlsPort`` (the same over TLS, as the service's 9093; needs
  ``TlsDir``), ``Tier`` (``Standard``, the default, ``Premium`` or ``Dedicated``: what the Kafka
  endpoint takes where the service differs by tier, see :data:`TIERS`) and
  ``EntraIdIssuerDir`` (the folder of the local Entra ID token issuer whose JWTs $cbs accepts;
  ``eventhubs_emulator.token_issuer``);
- per entity: ``RetentionMinutes``, ``RetentionEventCount``, ``MaxEventSizeBytes``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_KEY_NAME = "RootManageSharedAccessKey"
DEFAULT_KEY = "SAS_KEY_VALUE"
DEFAULT_MAX_EVENT_SIZE = 1024 * 1024
DEFAULT_CONSUMER_GROUP = "$Default"
DEFAULT_MAX_RECEIVERS = 5  # receivers without owner level per partition and consumer group, as on the service


class ConfigError(ValueError):
    """The configuration is invalid; the message names the offending field."""


@dataclass
class HubConfig:
    """One event hub: its name, partition count, consumer groups and retention."""

    name: str
    partition_count: int = 2
    consumer_groups: list[str] = field(default_factory=list)
    retention_minutes: float | None = None
    retention_event_count: int | None = None
    max_event_size: int | None = None

    def all_consumer_groups(self) -> list[str]:
        """The configured consumer groups plus ``$Default`` (which always exists)."""
        groups = [DEFAULT_CONSUMER_GROUP]
        groups += [g for g in self.consumer_groups if g.lower() != DEFAULT_CONSUMER_GROUP.lower()]
        return groups


#: The namespace tiers the emulator can play; Kafka compression (gzip) is Premium and Dedicated only.
TIERS = ("Standard", "Premium", "Dedicated")

#: The tiers whose Kafka endpoint takes compressed (gzip) batches; the others refuse every codec.
KAFKA_GZIP_TIERS = ("Premium", "Dedicated")


@dataclass
class EmulatorConfig:
    """The whole emulator configuration: one namespace with its hubs and the SAS key."""

    hubs: list[HubConfig]
    namespace: str = "emulatorNs1"
    key_name: str = DEFAULT_KEY_NAME
    key: str = DEFAULT_KEY
    max_event_size: int = DEFAULT_MAX_EVENT_SIZE
    retention_minutes: float | None = None
    retention_event_count: int | None = None
    max_receivers_per_partition: int = DEFAULT_MAX_RECEIVERS
    websocket_port: int | None = None  # extra listener for AMQP over WebSockets (None = only the AMQP port)
    tls_port: int | None = None  # extra listener for AMQPS and WSS (None = no TLS)
    tls_dir: str | None = None  # where the TLS port's CA and certificate are (made on first use)
    kafka_port: int | None = None  # the Kafka endpoint (None = no Kafka endpoint)
    kafka_tls_port: int | None = None  # the Kafka endpoint over TLS (None = none; needs tls_dir)
    entra_id_issuer_dir: str | None = None  # the trusted token issuer's folder (None = SAS only)
    tier: str = "Standard"  # one of TIERS

    @classmethod
    def single_hub(
        cls,
        name: str,
        partition_count: int = 2,
        consumer_groups: list[str] | None = None,
        **extras: Any,
    ) -> EmulatorConfig:
        """A config with one hub (handy in tests); ``extras`` set EmulatorConfig fields."""
        hub = HubConfig(
            name=name, partition_count=partition_count, consumer_groups=list(consumer_groups or [])
        )
        cfg = cls(hubs=[hub], **extras)
        cfg.validate()
        return cfg

    @classmethod
    def many_hubs(
        cls, hubs: dict[str, int], consumer_groups: list[str] | None = None, **extras: Any
    ) -> EmulatorConfig:
        """A config with several hubs given as ``{name: partition_count}``, each with ``consumer_groups``."""
        cfg = cls(
            hubs=[
                HubConfig(name=n, partition_count=c, consumer_groups=list(consumer_groups or []))
                for n, c in hubs.items()
            ],
            **extras,
        )
        cfg.validate()
        return cfg

    def connection_string(self, host: str, port: int, hub: str) -> str:
        """The connection string for ``hub`` on ``host:port`` (emulator mode, plain AMQP)."""
        self.hub(hub)  # KeyError for an unknown hub
        return (
            f"Endpoint=sb://{host}:{port};SharedAccessKeyName={self.key_name};"
            f"SharedAccessKey={self.key};EntityPath={hub};UseDevelopmentEmulator=true"
        )

    def printable_connection_string(self, host: str, port: int, hub: str) -> str:
        """:meth:`connection_string` as the CLI prints it: the key shown only when it is the
        emulator's published development key (:data:`DEFAULT_KEY`); a key of your own is masked
        (``SharedAccessKey=***``), as a secret."""
        text = self.connection_string(host, port, hub)
        return (
            text
            if self.key == DEFAULT_KEY
            else text.replace(f"SharedAccessKey={self.key};", "SharedAccessKey=***;")
        )

    def to_document(self) -> dict[str, Any]:
        """This config as a Config.json document (the inverse of :func:`parse_config`).

        Only the extras that differ from their defaults are written, so a config with none is a
        file the official emulator reads as it is.
        """
        entities = []
        for h in self.hubs:
            entity: dict[str, Any] = {
                "Name": h.name,
                "PartitionCount": h.partition_count,
                "ConsumerGroups": [{"Name": g} for g in h.consumer_groups],
            }
            for key, value in (
                ("RetentionMinutes", h.retention_minutes),
                ("RetentionEventCount", h.retention_event_count),
                ("MaxEventSizeBytes", h.max_event_size),
            ):
                if value is not None:
                    entity[key] = value
            entities.append(entity)
        extras = {
            key: value
            for key, value, default in (
                ("SharedAccessKeyName", self.key_name, DEFAULT_KEY_NAME),
                ("SharedAccessKey", self.key, DEFAULT_KEY),
                ("MaxEventSizeBytes", self.max_event_size, DEFAULT_MAX_EVENT_SIZE),
                ("RetentionMinutes", self.retention_minutes, None),
                ("RetentionEventCount", self.retention_event_count, None),
                ("MaxReceiversPerPartition", self.max_receivers_per_partition, DEFAULT_MAX_RECEIVERS),
                ("WebSocketPort", self.websocket_port, None),
                ("TlsPort", self.tls_port, None),
                ("TlsDir", self.tls_dir, None),
                ("KafkaPort", self.kafka_port, None),
                ("KafkaTlsPort", self.kafka_tls_port, None),
                ("EntraIdIssuerDir", self.entra_id_issuer_dir, None),
                ("Tier", self.tier, "Standard"),
            )
            if value != default
        }
        user: dict[str, Any] = {
            "NamespaceConfig": [{"Type": "EventHub", "Name": self.namespace, "Entities": entities}],
            "LoggingConfig": {"Type": "Console"},
        }
        if extras:
            user["EmulatorExtras"] = extras
        return {"UserConfig": user}

    def write(self, path: str | Path) -> Path:
        """Write this config as a Config.json file at ``path`` (see :meth:`to_document`); returns the path."""
        target = Path(path)
        target.write_text(json.dumps(self.to_document(), indent=2), encoding="utf-8")
        return target

    def hub(self, name: str) -> HubConfig:
        """The hub called ``name`` (case-insensitive); KeyError if there is none."""
        for h in self.hubs:
            if h.name.lower() == name.lower():
                return h
        raise KeyError(name)

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid field."""
        if not self.hubs:
            raise ConfigError("UserConfig.NamespaceConfig[0].Entities: at least one event hub is required")
        seen: set[str] = set()
        for i, h in enumerate(self.hubs):
            where = f"UserConfig.NamespaceConfig[0].Entities[{i}]"
            if not isinstance(h.name, str) or not h.name.strip():
                raise ConfigError(f"{where}.Name: must be a non-empty string")
            if "/" in h.name:
                raise ConfigError(f"{where}.Name: must not contain '/' (got {h.name!r})")
            if h.name.lower() in seen:
                raise ConfigError(f"{where}.Name: duplicate event hub name {h.name!r}")
            seen.add(h.name.lower())
            if isinstance(h.partition_count, bool) or not isinstance(h.partition_count, int):
                raise ConfigError(f"{where}.PartitionCount: must be an integer")
            if not 1 <= h.partition_count <= 1024:
                raise ConfigError(
                    f"{where}.PartitionCount: must be between 1 and 1024 (got {h.partition_count})"
                )
            for j, g in enumerate(h.consumer_groups):
                if not isinstance(g, str) or not g.strip() or "/" in g:
                    raise ConfigError(
                        f"{where}.ConsumerGroups[{j}].Name: must be a non-empty string without '/'"
                    )
            _check_positive(h.retention_minutes, f"{where}.RetentionMinutes")
            _check_positive(h.retention_event_count, f"{where}.RetentionEventCount", integer=True)
            _check_positive(h.max_event_size, f"{where}.MaxEventSizeBytes", integer=True)
        if not self.key_name or not isinstance(self.key_name, str):
            raise ConfigError("UserConfig.EmulatorExtras.SharedAccessKeyName: must be a non-empty string")
        if not self.key or not isinstance(self.key, str):
            raise ConfigError("UserConfig.EmulatorExtras.SharedAccessKey: must be a non-empty string")
        _check_positive(self.max_event_size, "UserConfig.EmulatorExtras.MaxEventSizeBytes", integer=True)
        _check_positive(self.retention_minutes, "UserConfig.EmulatorExtras.RetentionMinutes")
        _check_positive(
            self.retention_event_count, "UserConfig.EmulatorExtras.RetentionEventCount", integer=True
        )
        limit = self.max_receivers_per_partition
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ConfigError(
                "UserConfig.EmulatorExtras.MaxReceiversPerPartition: must be a whole number >= 0"
            )
        ports = (
            ("WebSocketPort", self.websocket_port),
            ("TlsPort", self.tls_port),
            ("KafkaPort", self.kafka_port),
            ("KafkaTlsPort", self.kafka_tls_port),
        )
        for key, port in ports:
            bad_type = isinstance(port, bool) or not isinstance(port, int)
            if port is not None and (bad_type or not 0 <= port <= 65535):
                raise ConfigError(
                    f"UserConfig.EmulatorExtras.{key}: must be a port number 0-65535 (got {port!r})"
                )
        if self.tier not in TIERS:
            raise ConfigError(
                f"UserConfig.EmulatorExtras.Tier: must be one of {', '.join(TIERS)} (got {self.tier!r})"
            )
        if self.kafka_tls_port is not None and not self.tls_dir:
            raise ConfigError(
                "UserConfig.EmulatorExtras.KafkaTlsPort needs TlsDir: the folder of its CA and certificate "
                "(made there on first use; clients trust <TlsDir>/ca.pem)"
            )
        if self.tls_port is not None and not self.tls_dir:
            raise ConfigError(
                "UserConfig.EmulatorExtras.TlsPort needs TlsDir: the folder of its CA and certificate "
                "(made there on first use; clients trust <TlsDir>/ca.pem)"
            )


def _check_positive(value: Any, where: str, integer: bool = False) -> None:
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (integer and not isinstance(value, int))
    ):
        raise ConfigError(f"{where}: must be a {'whole ' if integer else ''}number")
    if value <= 0:
        raise ConfigError(f"{where}: must be greater than 0 (got {value})")


def _get(obj: Any, key: str, where: str, kind: type | tuple[type, ...], required: bool = True) -> Any:
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: must be an object")
    if key not in obj:
        if required:
            raise ConfigError(f"{where}.{key}: required field is missing")
        return None
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise ConfigError(f"{where}.{key}: must be of type {names} (got {type(value).__name__})")
    return value


def parse_config(data: Any) -> EmulatorConfig:
    """Build an EmulatorConfig from the parsed Config.json document."""
    user = _get(data, "UserConfig", "Config", dict)
    namespaces = _get(user, "NamespaceConfig", "UserConfig", list)
    if len(namespaces) != 1:
        raise ConfigError(
            f"UserConfig.NamespaceConfig: exactly one namespace is supported (got {len(namespaces)})"
        )
    ns = namespaces[0]
    where_ns = "UserConfig.NamespaceConfig[0]"
    ns_type = _get(ns, "Type", where_ns, str, required=False)
    if ns_type is not None and ns_type != "EventHub":
        raise ConfigError(f"{where_ns}.Type: must be 'EventHub' (got {ns_type!r})")
    ns_name = _get(ns, "Name", where_ns, str, required=False) or "emulatorNs1"
    entities = _get(ns, "Entities", where_ns, list)
    hubs = []
    for i, ent in enumerate(entities):
        where = f"{where_ns}.Entities[{i}]"
        name = _get(ent, "Name", where, str)
        count = _get(ent, "PartitionCount", where, (int, str))
        if isinstance(count, str):
            if not count.strip().isdigit():
                raise ConfigError(f"{where}.PartitionCount: must be an integer (got {count!r})")
            count = int(count)
        groups_raw = _get(ent, "ConsumerGroups", where, list, required=False) or []
        groups = []
        for j, g in enumerate(groups_raw):
            groups.append(_get(g, "Name", f"{where}.ConsumerGroups[{j}]", str))
        hubs.append(
            HubConfig(
                name=name,
                partition_count=count,
                consumer_groups=groups,
                retention_minutes=_get(ent, "RetentionMinutes", where, (int, float), required=False),
                retention_event_count=_get(ent, "RetentionEventCount", where, int, required=False),
                max_event_size=_get(ent, "MaxEventSizeBytes", where, int, required=False),
            )
        )
    extras = _get(user, "EmulatorExtras", "UserConfig", dict, required=False) or {}
    where_x = "UserConfig.EmulatorExtras"
    cfg = EmulatorConfig(
        hubs=hubs,
        namespace=ns_name,
        key_name=_get(extras, "SharedAccessKeyName", where_x, str, required=False) or DEFAULT_KEY_NAME,
        key=_get(extras, "SharedAccessKey", where_x, str, required=False) or DEFAULT_KEY,
        max_event_size=_get(extras, "MaxEventSizeBytes", where_x, int, required=False)
        or DEFAULT_MAX_EVENT_SIZE,
        retention_minutes=_get(extras, "RetentionMinutes", where_x, (int, float), required=False),
        retention_event_count=_get(extras, "RetentionEventCount", where_x, int, required=False),
    )
    receivers = _get(extras, "MaxReceiversPerPartition", where_x, int, required=False)
    if receivers is not None:
        cfg.max_receivers_per_partition = receivers
    cfg.websocket_port = _get(extras, "WebSocketPort", where_x, int, required=False)
    cfg.tls_port = _get(extras, "TlsPort", where_x, int, required=False)
    cfg.tls_dir = _get(extras, "TlsDir", where_x, str, required=False)
    cfg.kafka_port = _get(extras, "KafkaPort", where_x, int, required=False)
    cfg.kafka_tls_port = _get(extras, "KafkaTlsPort", where_x, int, required=False)
    cfg.entra_id_issuer_dir = _get(extras, "EntraIdIssuerDir", where_x, str, required=False)
    cfg.tier = _get(extras, "Tier", where_x, str, required=False) or "Standard"
    cfg.validate()
    return cfg


def load_config(path: str | Path) -> EmulatorConfig:
    """Read and validate a Config.json file; ConfigError names what is wrong."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config file {str(p)!r} cannot be read: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"config file {str(p)!r} is not valid JSON: {exc.msg} at line {exc.lineno}"
        ) from None
    return parse_config(data)
