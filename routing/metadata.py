"""What the cluster knows about topics, consumer groups and broker groups: the records of
the routing state machine and the rules their names follow.

These are plain frozen dataclasses so that the state machine can be pickled by pysyncobj
and read by other threads without copies: a change replaces a record, it never mutates one.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from routing.formats import NEWEST_FORMAT, PICKLED

NAME_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")  # fullmatch: "$" would let a newline end a name
NAME_MAX_LENGTH = 127  # RocketMQ's limit for topic and group names
NODE_NAME_PATTERN = re.compile(r"[a-zA-Z0-9_.-]{1,64}")
QUEUES_MAX = 1024
DEFAULT_MAX_DELIVERY_ATTEMPTS = 16
MAX_DELIVERY_ATTEMPTS_LIMIT = 1000
SYSTEM_PREFIX = "%SYS%"
DLQ_PREFIX = "%DLQ%"
# RocketMQ 4.x consumers retry failed messages through %RETRY%<group> (node/consumer_retry.py)
RETRY_PREFIX = "%RETRY%"
# So %DLQ%<group> and %RETRY%<group> are legal names.
GROUP_NAME_MAX_LENGTH = NAME_MAX_LENGTH - max(len(DLQ_PREFIX), len(RETRY_PREFIX))
# Groups created on first use stop here: anyone allowed to consume may name a new group in
# every request, and each one is a routing record and a dead-letter topic on every node
# for good. An operator creates groups beyond it explicitly.
FIRST_USE_GROUPS_MAX = 10_000
# RocketMQ 5.5's topic attribute lite.topic.expiration: minutes a LITE topic's lite topic may
# go without a message before it is deleted (node/lite_expiry.py); -1 (and 0): never.
LITE_EXPIRATION_NEVER = -1
LITE_EXPIRATION_MAX_MINUTES = 30 * 24 * 60


def dead_letter_topic_of(group: str) -> str:
    return DLQ_PREFIX + group


def retry_topic_of(group: str) -> str:
    return RETRY_PREFIX + group


class MessageType(enum.Enum):
    """What a topic takes. UNSPECIFIED (created without a type) takes every type, as in
    RocketMQ 5: each message is handled as the type it declares."""

    UNSPECIFIED = "UNSPECIFIED"
    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    PRIORITY = "PRIORITY"  # RocketMQ 5.4: the queue id is the priority (node/admission.py)
    LITE = "LITE"  # RocketMQ 5.5: many lite topics inside one topic (node/lite_index.py)


class Permission(enum.Enum):
    READ = "READ"
    WRITE = "WRITE"
    READ_WRITE = "READ_WRITE"


class Role(enum.Enum):
    MASTER = "MASTER"
    SLAVE = "SLAVE"


class TopicError(ValueError):
    """A request names an invalid or unknown topic, group or broker group; ``reason`` is a
    stable upper-case word that maps to a status code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class TopicConfig:
    """A topic as one broker group serves it: ``queue_count`` queues, ids 0..n-1."""

    name: str
    queue_count: int = 8
    message_type: MessageType = MessageType.NORMAL
    permission: Permission = Permission.READ_WRITE
    lite_expiration_minutes: int = LITE_EXPIRATION_NEVER


@dataclass(frozen=True)
class GroupConfig:
    name: str
    max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS
    fifo: bool = False
    # RocketMQ 5.5's ``lite.sub.model=Exclusive``: a lite topic has at most one subscriber
    # in the group; the newest takes it (node/lite_subscriptions.py).
    lite_exclusive: bool = False


@dataclass(frozen=True)
class TopicRoute:
    """A topic across the cluster: ``queues`` maps each broker group that hosts it to its
    queue count there (RocketMQ's per-broker queues: every group numbers its own 0..n-1)."""

    name: str
    queues: tuple[tuple[str, int], ...]
    message_type: MessageType = MessageType.NORMAL
    permission: Permission = Permission.READ_WRITE
    # A default, so that routes pickled before the field existed load as never expiring.
    lite_expiration_minutes: int = LITE_EXPIRATION_NEVER

    def queue_count_in(self, broker_group: str) -> int:
        for group, count in self.queues:
            if group == broker_group:
                return count
        return 0

    def on(self, broker_group: str) -> TopicConfig | None:
        """The topic as ``broker_group`` serves it, or None when it has no queues there."""
        count = self.queue_count_in(broker_group)
        if count == 0:
            return None
        return TopicConfig(
            self.name, count, self.message_type, self.permission, self.lite_expiration_minutes
        )


@dataclass(frozen=True)
class Member:
    """One node of a broker group as the routing state last heard of it.

    ``heartbeats`` counts the heartbeats applied; the controller marks a node down only
    when that count has not moved for a lease, so a heartbeat racing with the decision
    wins (``MarkNodeDown`` names the count it saw). ``damaged_log``: its recovery cut the
    log after an invalid record and it has not refilled the range from a master yet
    (``store/damaged_ranges.py``); see ``healthy_first``."""

    node_id: str
    broker_group: str
    grpc_address: str
    ha_address: str
    metrics_address: str
    alive: bool = True
    heartbeats: int = 0
    last_heartbeat_ms: int = 0
    max_offset: int = 0
    # A default, so that members pickled before the field existed load as healthy.
    damaged_log: bool = False
    # Where RocketMQ 4.x clients reach it (its remoting port); "" for a node that registered
    # before the field existed, which the NameServer role leaves out of routes.
    remoting_address: str = ""
    # Its routing voter's address ("" for a read-only replica, or a node that registered
    # before the field existed): the controller keeps Raft leadership off masters' nodes.
    raft_address: str = ""
    # Its ferrymq version and the newest routing format its code reads, as it registered
    # ("" and 1 for a node of 0.1.0): SetRoutingFormat waits for every member to read it.
    software_version: str = ""
    routing_format: int = NEWEST_FORMAT

    def __setstate__(self, fields: dict) -> None:
        """A member pickled by 0.1.0 names no format: its node read format 1 only."""
        self.__dict__.update({"routing_format": PICKLED, **fields})


@dataclass(frozen=True)
class BrokerGroup:
    """One master and its slaves. ``epoch`` grows by one with every change of master; the
    in-sync set has its own epoch (the HA layer changes it through the controller)."""

    name: str
    master: str | None = None
    epoch: int = 0
    in_sync: frozenset[str] = field(default_factory=frozenset)
    in_sync_epoch: int = 0
    lost_by: frozenset[str] = field(default_factory=frozenset)  # slaves that lost the master
    # (reporter, its log's end when it reported) for the reports that said: a log without
    # a link to its master does not grow, so these ends are fresher than any heartbeat's.
    lost_ends: tuple[tuple[str, int], ...] = ()

    def reported_end(self, node_id: str) -> int | None:
        """``node_id``'s log end as its lost-master report in this epoch gave it."""
        return next((end for node, end in self.lost_ends if node == node_id), None)


def healthy_first(members: list[Member]) -> list[Member]:
    """The members whose log is whole, or all of them when none is: a node whose log was
    cut by its recovery becomes master only while no candidate with a whole log exists
    (every election, handover and switchover goes through this rule)."""
    healthy = [m for m in members if not m.damaged_log]
    return healthy or members


def master_raft_addresses(members: dict[str, Member], groups: Iterable[BrokerGroup]) -> set[str]:
    """The Raft addresses of the nodes that are a broker group's master."""
    return {
        members[g.master].raft_address
        for g in groups
        if g.master in members and members[g.master].raft_address
    }


def leadership_heirs(
    connected: Iterable[tuple[str, bool]], masters: set[str], self_address: str
) -> list[str]:
    """The voters routing's leader may hand its lead to, best first: connected, not this
    one, those on no master's node (``masters``) before the others (a master's crash
    then never takes routing's leader with it)."""
    others = [voter for voter, up in connected if up and voter != self_address]
    return sorted(others, key=lambda voter: (voter in masters, voter))


def may_leave_in_sync(master: Member | None, member: Member | None) -> bool:
    """Whether ``member`` may be dropped from the in-sync set of ``master``'s group. Not a
    whole member while the master's own log is damaged: that member holds what the
    master's recovery cut, and taking the group over when it registers
    (``RoutingState._replaces_damaged_master``) needs it in the set. Dropped, it would
    follow the damaged master and cut its whole log to it."""
    if master is None or not master.damaged_log:
        return True
    return member is None or member.damaged_log


def check_name(kind: str, name: str) -> None:
    """``TopicError`` unless ``name`` is a legal topic or group name."""
    if not name:
        raise TopicError(f"ILLEGAL_{kind}", f"{kind.lower()} name is empty")
    if len(name) > NAME_MAX_LENGTH:
        raise TopicError(
            f"ILLEGAL_{kind}", f"{kind.lower()} name is {len(name)} characters, the limit is 127"
        )
    if not NAME_PATTERN.fullmatch(name):
        raise TopicError(
            f"ILLEGAL_{kind}",
            f"{kind.lower()} name {name!r} has characters outside [%|a-zA-Z0-9_-]",
        )


def check_topic_config(name: str, queue_count: int) -> None:
    check_name("TOPIC", name)
    if name.startswith((SYSTEM_PREFIX, DLQ_PREFIX, RETRY_PREFIX)):
        raise TopicError(
            "ILLEGAL_TOPIC",
            f"names starting with {SYSTEM_PREFIX}, {DLQ_PREFIX} or {RETRY_PREFIX} are reserved",
        )
    if not 1 <= queue_count <= QUEUES_MAX:
        raise TopicError("ILLEGAL_TOPIC", f"queue count must be 1..{QUEUES_MAX}, got {queue_count}")


def check_lite_expiration(message_type: MessageType, minutes: int) -> None:
    """``TopicError`` unless ``minutes`` is a lite expiration ``message_type`` may have:
    -1..43,200 (30 days, RocketMQ's range; -1 and 0 never expire) on a LITE topic, -1 on
    any other."""
    if not LITE_EXPIRATION_NEVER <= minutes <= LITE_EXPIRATION_MAX_MINUTES:
        raise TopicError(
            "ILLEGAL_TOPIC",
            f"lite.topic.expiration must be {LITE_EXPIRATION_NEVER}.."
            f"{LITE_EXPIRATION_MAX_MINUTES} minutes (-1: never), got {minutes}",
        )
    if minutes != LITE_EXPIRATION_NEVER and message_type is not MessageType.LITE:
        raise TopicError(
            "ILLEGAL_TOPIC",
            f"lite.topic.expiration is for LITE topics only, this one is "
            f"{message_type.value} (leave it at -1)",
        )


def check_group_config(config: GroupConfig) -> None:
    check_name("CONSUMER_GROUP", config.name)
    if len(config.name) > GROUP_NAME_MAX_LENGTH:
        raise TopicError(
            "ILLEGAL_CONSUMER_GROUP",
            f"group name is {len(config.name)} characters, the limit is "
            f"{GROUP_NAME_MAX_LENGTH} (its topics {DLQ_PREFIX}<group> and {RETRY_PREFIX}<group> "
            "must fit)",
        )
    if not 1 <= config.max_delivery_attempts <= MAX_DELIVERY_ATTEMPTS_LIMIT:
        raise TopicError(
            "ILLEGAL_CONSUMER_GROUP",
            f"max delivery attempts must be 1..{MAX_DELIVERY_ATTEMPTS_LIMIT}",
        )
