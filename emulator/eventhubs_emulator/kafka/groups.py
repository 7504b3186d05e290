"""Consumer group membership (the classic rebalance protocol) for the Kafka endpoint.

A group moves EMPTY -> JOINING -> AWAITING_SYNC -> STABLE. A JoinGroup from a new member, a member
leaving or a member's session expiring starts a rebalance (JOINING); it completes when every known
member has sent JoinGroup again, or at the rebalance timeout without the ones that did not (they are
dropped). Then the generation goes up, the first member becomes leader and gets everyone's metadata,
and SyncGroup hands each member the assignment the leader sent. Members in a stable group learn of a
rebalance from Heartbeat (REBALANCE_IN_PROGRESS). Everything runs on the emulator's loop; groups are
kept in memory only.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass, field

from .protocol import GROUP_INITIAL_REBALANCE_DELAY, MAX_GROUP_ID_LENGTH, ErrorCode

log = logging.getLogger("eventhubs_emulator.kafka")

EMPTY, JOINING, AWAITING_SYNC, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable"


@dataclass
class Member:
    """One consumer in a group."""

    member_id: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    last_seen: float = field(default_factory=time.monotonic)
    join: asyncio.Future | None = None  # answered when the rebalance completes
    sync: asyncio.Future | None = None  # answered when the leader's assignment arrives
    assignment: bytes = b""
    client_id: str = ""
    client_host: str = ""


class Group:
    """One consumer group's membership."""

    def __init__(self, group_id: str, initial_delay: float = 0.0) -> None:
        self.group_id = group_id
        self.initial_delay = initial_delay
        self._initial: asyncio.TimerHandle | None = None  # the first rebalance's delay, while it runs
        self._initial_ends = 0.0  # the latest it may end (its start plus the rebalance timeout)
        self.state = EMPTY
        self.generation = 0
        self.members: dict[str, Member] = {}
        self.leader = ""
        self.protocol_type = ""
        self.protocol = ""
        self.pending: set[str] = set()  # member ids handed out by MEMBER_ID_REQUIRED, not yet joined
        self._deadline: asyncio.TimerHandle | None = None

    def expire_sessions(self) -> None:
        """Drop members whose last heartbeat is older than their session timeout."""
        now = time.monotonic()
        gone = [
            m for m in self.members.values() if now - m.last_seen > m.session_timeout_ms / 1000 and not m.join
        ]
        for member in gone:
            self.remove(member.member_id)

    def remove(self, member_id: str) -> None:
        """A member leaves; the others rebalance."""
        member = self.members.pop(member_id, None)
        if member is None:
            return
        for future in (member.join, member.sync):
            if future is not None and not future.done():
                future.set_result({"error_code": ErrorCode.UNKNOWN_MEMBER_ID})
        if not self.members:
            self.state, self.leader = EMPTY, ""
            self._cancel_deadline()
        else:
            self._prepare_rebalance()

    def _prepare_rebalance(self) -> None:
        for member in self.members.values():
            if member.sync is not None and not member.sync.done():
                member.sync.set_result({"error_code": ErrorCode.REBALANCE_IN_PROGRESS})
        loop = asyncio.get_running_loop()
        timeout = max(m.rebalance_timeout_ms for m in self.members.values()) / 1000
        first = self.state == EMPTY and self.initial_delay > 0
        if self.state != JOINING:
            self.state = JOINING
            self._cancel_deadline()
            self._deadline = loop.call_later(timeout, self._rebalance_deadline)
        if first:
            self._initial_ends = time.monotonic() + timeout
        if self._initial_ends > time.monotonic():  # the first rebalance: wait for more members
            if self._initial is not None:
                self._initial.cancel()
            delay = min(self.initial_delay, self._initial_ends - time.monotonic())
            self._initial = loop.call_later(delay, self._initial_delay_over)
        self._maybe_complete_join()

    def _initial_delay_over(self) -> None:
        self._initial, self._initial_ends = None, 0.0
        self._maybe_complete_join()

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if self._initial is not None:
            self._initial.cancel()
            self._initial, self._initial_ends = None, 0.0

    def _rebalance_deadline(self) -> None:
        self._deadline = None
        for member in [m for m in self.members.values() if m.join is None]:
            self.members.pop(member.member_id)
        if self.members:
            self._maybe_complete_join()
        else:
            self.state = EMPTY

    def _maybe_complete_join(self) -> None:
        if (
            self.state != JOINING
            or self._initial is not None
            or any(m.join is None for m in self.members.values())
        ):
            return
        self._cancel_deadline()
        members = list(self.members.values())
        common = set.intersection(*({name for name, _ in m.protocols} for m in members))
        self.protocol = next(name for name, _ in members[0].protocols if name in common) if common else ""
        self.generation += 1
        self.leader = self.leader if self.leader in self.members else members[0].member_id
        self.state = AWAITING_SYNC
        log.debug(
            "Kafka group %s: generation %d, leader %s, members %s, protocol %r",
            self.group_id,
            self.generation,
            self.leader,
            [m.member_id for m in members],
            self.protocol,
        )
        everyone = [
            {"member_id": m.member_id, "metadata": dict(m.protocols).get(self.protocol, b"")} for m in members
        ]
        for member in members:
            assert member.join is not None
            future, member.join = member.join, None
            error = ErrorCode.NONE if common else ErrorCode.INCONSISTENT_GROUP_PROTOCOL
            future.set_result(
                {
                    "error_code": error,
                    "generation_id": self.generation,
                    "protocol_name": self.protocol,
                    "leader": self.leader,
                    "member_id": member.member_id,
                    "members": everyone if member.member_id == self.leader else [],
                }
            )


class GroupCoordinator:
    """Every consumer group of the endpoint."""

    def __init__(self, initial_delay: float = GROUP_INITIAL_REBALANCE_DELAY) -> None:
        self.groups: dict[str, Group] = {}
        self.initial_delay = initial_delay
        self._ids = itertools.count(1)

    def group(self, group_id: str) -> Group:
        """The group, made on first use."""
        if group_id not in self.groups:
            self.groups[group_id] = Group(group_id, self.initial_delay)
        return self.groups[group_id]

    def describe(self, group_id: str, has_offsets: bool) -> dict:
        """DescribeGroups' entry for one group: Kafka's state names; a group known only by its committed
        offsets is Empty, an unknown one Dead; protocol, metadata and assignments only when Stable."""
        group = self.groups.get(group_id)
        if group is not None:
            group.expire_sessions()
        if group is None or (not group.members and not group.protocol_type):
            state = EMPTY if group is not None or has_offsets else "Dead"
            return {
                "error_code": ErrorCode.NONE,
                "group_id": group_id,
                "group_state": state,
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
            }
        stable = group.state == STABLE
        members = [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": dict(m.protocols).get(group.protocol, b"") if stable else b"",
                "member_assignment": m.assignment if stable else b"",
            }
            for m in group.members.values()
        ]
        return {
            "error_code": ErrorCode.NONE,
            "group_id": group_id,
            "group_state": group.state,
            "protocol_type": group.protocol_type,
            "protocol_data": group.protocol if stable else "",
            "members": members,
        }

    async def join(self, req: dict, client_id: str, client_host: str = "", version: int = 0) -> dict:
        """JoinGroup: wait for the rebalance to complete and answer with this member's part.

        From v4 a member without an id is first given one with MEMBER_ID_REQUIRED and joins again with
        it (KIP-394, as Kafka does): only then does it count as a member of the rebalance."""
        if not req["group_id"] or len(req["group_id"]) > MAX_GROUP_ID_LENGTH:
            return {"error_code": ErrorCode.INVALID_GROUP_ID, "members": []}
        group = self.group(req["group_id"])
        group.expire_sessions()
        if group.members and req["protocol_type"] != group.protocol_type:
            return {"error_code": ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "members": []}
        member_id = req["member_id"]
        if member_id and member_id not in group.members and member_id not in group.pending:
            return {"error_code": ErrorCode.UNKNOWN_MEMBER_ID, "members": []}
        if not member_id:
            member_id = f"{client_id or 'consumer'}-{next(self._ids)}"
            if version >= 4:
                group.pending.add(member_id)
                return {"error_code": ErrorCode.MEMBER_ID_REQUIRED, "member_id": member_id, "members": []}
        group.pending.discard(member_id)
        group.protocol_type = req["protocol_type"]
        member = group.members.get(member_id)
        rebalance_ms = (
            req["rebalance_timeout_ms"] if req["rebalance_timeout_ms"] > 0 else req["session_timeout_ms"]
        )
        protocols = [(p["name"], p["metadata"] or b"") for p in req["protocols"]]
        if member is None:
            member = Member(member_id, protocols, req["session_timeout_ms"], rebalance_ms)
            member.client_id, member.client_host = client_id, client_host
            group.members[member_id] = member
        else:
            member.protocols, member.last_seen = protocols, time.monotonic()
        if member.join is not None and not member.join.done():
            member.join.set_result({"error_code": ErrorCode.REBALANCE_IN_PROGRESS, "members": []})
        member.join = asyncio.get_running_loop().create_future()
        future = member.join
        group._prepare_rebalance()
        return await future

    async def sync(self, req: dict) -> dict:
        """SyncGroup: the leader hands out assignments; everyone gets theirs."""
        group = self.groups.get(req["group_id"])
        member = group.members.get(req["member_id"]) if group is not None else None
        if group is None or member is None:
            return {"error_code": ErrorCode.UNKNOWN_MEMBER_ID, "assignment": b""}
        if req["generation_id"] != group.generation:
            return {"error_code": ErrorCode.ILLEGAL_GENERATION, "assignment": b""}
        if group.state == JOINING:
            return {"error_code": ErrorCode.REBALANCE_IN_PROGRESS, "assignment": b""}
        member.last_seen = time.monotonic()
        if group.state == STABLE:
            return {"error_code": ErrorCode.NONE, "assignment": member.assignment}
        member.sync = asyncio.get_running_loop().create_future()
        future = member.sync
        if member.member_id == group.leader:
            given = {a["member_id"]: a["assignment"] or b"" for a in req["assignments"]}
            group.state = STABLE
            log.debug("Kafka group %s: generation %d assigned %s", group.group_id, group.generation, given)
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
                if m.sync is not None and not m.sync.done():
                    m.sync.set_result({"error_code": ErrorCode.NONE, "assignment": m.assignment})
        return await future

    def heartbeat(self, req: dict) -> dict:
        """Heartbeat: keeps the session; says when a rebalance needs the member to rejoin."""
        group = self.groups.get(req["group_id"])
        if group is not None:
            group.expire_sessions()
        member = group.members.get(req["member_id"]) if group is not None else None
        if group is None or member is None:
            return {"error_code": ErrorCode.UNKNOWN_MEMBER_ID}
        member.last_seen = time.monotonic()
        if group.state == JOINING:
            return {"error_code": ErrorCode.REBALANCE_IN_PROGRESS}
        if req["generation_id"] != group.generation:
            return {"error_code": ErrorCode.ILLEGAL_GENERATION}
        return {"error_code": ErrorCode.NONE}

    def leave(self, req: dict) -> dict:
        """LeaveGroup (v0-2: one member)."""
        group = self.groups.get(req["group_id"])
        if group is None or req["member_id"] not in group.members:
            return {"error_code": ErrorCode.UNKNOWN_MEMBER_ID}
        group.remove(req["member_id"])
        return {"error_code": ErrorCode.NONE}

    def check_commit(self, group_id: str, generation: int, member_id: str) -> ErrorCode:
        """Whether an OffsetCommit may write: outside a generation (-1) always, else for a member of the
        current one (also while a rebalance gathers members, as Kafka allows, but not awaiting sync)."""
        if generation < 0:
            return ErrorCode.NONE
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state == AWAITING_SYNC:  # while joining, the current generation may still commit
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE
