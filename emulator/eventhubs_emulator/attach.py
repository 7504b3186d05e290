"""Attach handling: what a client's attach becomes, a link set up for its node or refused.

Link kinds, by the node the client attaches to:

- ``$cbs`` / ``$management``: request/response pairs (the response goes to the client's receiver link
  on the same node and session, with correlation-id = request message-id);
- ``<hub>`` or ``<hub>/Partitions/<id>`` with the client sending: a producer;
- ``<hub>/ConsumerGroups/<cg>/Partitions/<id>`` with the client receiving: a consumer, fed with
  pre-settled transfers as long as it has link credit.

Every attach is answered with an attach; a refused one (unknown entity, no token, offline partition,
owner level) is then detached with the reason. This runs once per attach, off the transfer/flow path.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from . import frames as F
from .codec import Described, Symbol, UByte, UInt, ULong
from .links import Link
from .positions import address_of, start_position
from .roles import LinkRefused, LinkSetupRole, ProtocolError

if TYPE_CHECKING:
    from .store import Broker

log = logging.getLogger("eventhubs_emulator")

#: The max-message-size of a producer link (one batch), as on the service.
LINK_MAX_MESSAGE_SIZE = 1024 * 1024
EPOCH = Symbol("com.microsoft:epoch")
RUNTIME_METRIC = "com.microsoft:enable-receiver-runtime-metric"


def on_attach(conn: LinkSetupRole, channel: int, fields: list) -> None:
    """Answer the client's attach on ``channel``: create the link, set it up for its node or refuse it."""
    session = conn.session(channel)
    name = fields[F.ATTACH_NAME]
    handle = int(fields[F.ATTACH_HANDLE])
    existing = session.links.get(handle)
    if existing is not None and not existing.closed:
        # Attaching over a live link would leave the first one's receiver registered for good
        # (a link the emulator already detached, awaiting the client's answer, is released).
        raise ProtocolError("amqp:session:handle-in-use", f"attach on handle {handle}, already in use")
    client_sends = not fields[F.ATTACH_ROLE]  # role false = sender
    source = fields[F.ATTACH_SOURCE]
    target = fields[F.ATTACH_TARGET]
    node_term = target if client_sends else source
    address = address_of(node_term)
    kind = "producer" if client_sends else "consumer"
    node = address.strip("/").lower()
    if node in ("$cbs", "$management"):
        kind = node[1:]  # "cbs" or "management": request/response nodes
    link = Link(session, str(name), handle, client_sends, kind)
    if client_sends:
        link.received = int(fields[F.ATTACH_INITIAL_DELIVERY_COUNT] or 0)
    session.links[handle] = link
    refusal: LinkRefused | None = None
    try:
        if kind == "producer":
            _setup_producer(conn, link, address)
        elif kind == "consumer":
            _setup_consumer(conn, link, address, source, fields)
    except LinkRefused as exc:
        refusal = exc
    if source is None:
        source = Described(F.SOURCE, [address if not client_sends else name] + [None] * 10)
    if target is None:
        target = Described(F.TARGET, [address if client_sends else name] + [None] * 6)
    max_size = None
    if kind == "producer":
        # The link limit bounds a whole batch (as on the service: 1 MiB); each event is checked
        # against the hub's max event size when it arrives.
        hub_limit = conn.broker.max_event_size(link.hub) if link.hub is not None else 0
        big_events = hub_limit > LINK_MAX_MESSAGE_SIZE
        max_size = ULong(hub_limit + 64 * 1024 if big_events else LINK_MAX_MESSAGE_SIZE)
    reply = [
        name,
        UInt(handle),
        client_sends,  # our role: receiver (true) when the client sends
        _ubyte(fields[3]),
        _ubyte(fields[4]),
        source,
        target,
        None,
        False,
        None if client_sends else UInt(0),
        max_size,
        None,
        None,
        None,
    ]
    conn.write(F.frame(channel, F.ATTACH, reply))
    if refusal is not None:
        log.debug(
            "attach refused: %s link %r handle %d on %r: %s",
            kind,
            link.name,
            handle,
            address,
            refusal.condition,
        )
        link.detach(refusal.condition, refusal.description)
        return
    if client_sends:
        conn.grant_credit(link, force=True)
    elif kind == "consumer":
        assert link.log is not None
        link.log.listeners.add(link.pump)
        log.debug(
            "consumer attached: link %r handle %d key %s epoch %s from seq %d; %d receivers on the key",
            link.name,
            handle,
            link.registry_key(),
            link.epoch,
            link.next_seq,
            len(conn.server.receivers.get(link.registry_key(), ())),
        )


def _refuse_if_offline(conn: LinkSetupRole, hub: str, partition: str) -> None:
    if conn.server.faults.partition_offline(hub, partition):
        raise LinkRefused(DETACH_FORCED, partition_offline_description(hub, partition))


def _setup_producer(conn: LinkSetupRole, link: Link, address: str) -> None:
    parts = [p for p in address.split("/") if p]
    hub = conn.broker.hub(parts[0]) if parts else None
    if hub is None:
        raise LinkRefused(
            "amqp:not-found", f"The messaging entity '{parts[0] if parts else ''}' could not be found."
        )
    link.hub = hub
    if len(parts) == 3 and parts[1].lower() == "partitions":
        if parts[2] not in hub.partitions:
            raise LinkRefused(
                "amqp:not-found", f"Partition '{parts[2]}' does not exist in event hub '{hub.name}'."
            )
        link.partition_id = parts[2]
        _refuse_if_offline(conn, hub.name, parts[2])
    elif len(parts) != 1:
        raise LinkRefused("amqp:not-found", f"'{address}' is not an event hub or partition address.")
    conn.require_grant(link, _entity_path(hub.name))


def _setup_consumer(conn: LinkSetupRole, link: Link, address: str, source: Any, fields: list) -> None:
    parts = [p for p in address.split("/") if p]
    if len(parts) != 5 or parts[1].lower() != "consumergroups" or parts[3].lower() != "partitions":
        raise LinkRefused(
            "amqp:not-found",
            f"'{address}' is not a consumer address (<hub>/ConsumerGroups/<group>/Partitions/<id>).",
        )
    hub = conn.broker.hub(parts[0])
    if hub is None:
        raise LinkRefused("amqp:not-found", f"The messaging entity '{parts[0]}' could not be found.")
    link.hub = hub
    group = hub.consumer_groups.get(parts[2].lower())
    if group is None:
        conn.server.warn_once(
            ("consumer group", hub.name.lower(), parts[2].lower()),
            "refused a receiver on consumer group %r of event hub %r: it is not configured "
            "(add it to the hub's ConsumerGroups in Config.json)",
            parts[2],
            hub.name,
        )
        raise LinkRefused("amqp:not-found", consumer_group_not_found(conn.broker, hub.name, parts[2]))
    link.consumer_group = group
    if parts[4] not in hub.partitions:
        raise LinkRefused(
            "amqp:not-found", f"Partition '{parts[4]}' does not exist in event hub '{hub.name}'."
        )
    link.partition_id = parts[4]
    _refuse_if_offline(conn, hub.name, parts[4])
    conn.require_grant(link, _entity_path(hub.name, "consumergroups", group, "partitions", parts[4]))
    log_ = hub.partitions[parts[4]]
    link.log = log_
    link.next_seq = start_position(log_, source)
    props = fields[F.ATTACH_PROPERTIES]
    if isinstance(props, dict) and props.get(EPOCH) is not None:
        link.epoch = int(props[EPOCH])
    caps = fields[F.ATTACH_DESIRED_CAPABILITIES]
    if isinstance(caps, str):
        caps = [caps]
    link.metrics = bool(caps) and RUNTIME_METRIC in [str(c) for c in caps]
    _claim_ownership(conn, link)


def _claim_ownership(conn: LinkSetupRole, link: Link) -> None:
    registry = conn.server.receivers.setdefault(link.registry_key(), set())
    existing = [other for other in registry if not other.closed]
    if link.epoch is None:
        owners = [o for o in existing if o.epoch is not None]
        if owners:
            raise LinkRefused(
                "amqp:link:stolen",
                f"Receiver with owner level '{owners[0].epoch}' already exists on partition "
                f"'{link.partition_id}'; a receiver without owner level cannot be created.",
            )
        limit = conn.broker.config.max_receivers_per_partition
        if limit and len(existing) >= limit:
            raise LinkRefused(
                "amqp:resource-limit-exceeded",
                f"Exceeded the maximum number of allowed receivers per partition in a consumer group "
                f"which is {limit} (partition '{link.partition_id}', consumer group "
                f"'{link.consumer_group}'). Close unused receivers or use an owner level.",
            )
    else:
        higher = [o for o in existing if o.epoch is not None and o.epoch > link.epoch]
        if higher:
            raise LinkRefused(
                "amqp:link:stolen",
                f"Receiver with a higher owner level '{higher[0].epoch}' already exists on partition "
                f"'{link.partition_id}'; owner level '{link.epoch}' is refused.",
            )
        for other in existing:
            other.detach(
                "amqp:link:stolen",
                f"New receiver with owner level '{link.epoch}' was created on partition "
                f"'{link.partition_id}'; this receiver was disconnected.",
            )
    registry.add(link)


def _entity_path(*parts: str) -> str:
    """The path a token must cover for an entity, lower-cased as grants are matched."""
    return "/".join(p.lower() for p in parts)


def consumer_group_not_found(broker: Broker, hub: str, group: str) -> str:
    """The detach description for a receiver on a consumer group the hub does not have.

    The first sentence is the service's (its entity name is ``<namespace>:eventhub:<hub>~32766|<group>``
    in the messages seen from Azure); the emulator adds which setting to change.
    """
    entity = f"{broker.config.namespace}:eventhub:{hub}~32766|{group}"
    return (
        f"The messaging entity '{entity}' could not be found. To know more visit "
        f"https://aka.ms/sbResourceMgrExceptions. (Emulator: consumer group '{group}' is not configured "
        f"for event hub '{hub}'; add it to the hub's ConsumerGroups in Config.json.)"
    )


#: What the service detaches links with when it moves a partition (clients retry it).
DETACH_FORCED = "amqp:link:detach-forced"


def partition_offline_description(hub: str, partition: str) -> str:
    """The detach's description while a partition is offline (the emulator's fault)."""
    return (
        f"The link to partition '{partition}' of event hub '{hub}' is force detached by the broker: the "
        "partition is being moved (emulator fault: partition offline). Retry the operation."
    )


def _ubyte(value: Any) -> UByte | None:
    return None if value is None else UByte(int(value))
