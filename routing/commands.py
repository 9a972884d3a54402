"""The commands of the routing state machine: the only way its state changes.

Each command is a frozen dataclass, written into the Raft log in the cluster's routing
format (``routing/formats.py``: pickled by pysyncobj, or a protobuf entry) and applied by
``RoutingState.apply`` on every replica in log order. Everything a command needs is in its
fields (never the applying replica's clock or files), so every replica reaches the same
state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from routing.acl import AclEntry
from routing.formats import NEWEST_FORMAT, PICKLED
from routing.metadata import LITE_EXPIRATION_NEVER, MessageType, Permission


@dataclass(frozen=True)
class CommandResult:
    """What applying a command did. ``reason`` is a stable word (``TOPIC_EXISTS``...)
    when ``ok`` is false; ``value`` is the record the command created or changed."""

    ok: bool
    reason: str = ""
    detail: str = ""
    value: object = None


@dataclass(frozen=True)
class RegisterNode:
    """A node announces itself (at every start). The first node of a broker group becomes
    its master with epoch 1 (RocketMQ's controller does the same on a first election).

    A master that registers again has restarted, and may have lost what it had not
    forced to disk: an in-sync member that heartbeated within ``lease_ms`` of
    ``wall_ms`` takes over (the one with the longest log), as after a failure; without
    one it stays master, in a new epoch.

    ``damaged_log``: the node's recovery cut its log after an invalid record and it has
    not refilled the range (``routing.metadata.healthy_first``). A healthy in-sync member
    that registers while the master's log is damaged takes the group over. Fields added
    later have defaults, so commands pickled before them still load."""

    node_id: str
    broker_group: str
    grpc_address: str
    ha_address: str = ""
    metrics_address: str = ""
    max_offset: int = 0
    wall_ms: int = 0
    lease_ms: int = 0
    damaged_log: bool = False
    remoting_address: str = ""  # RocketMQ 4.x clients' port (node/remoting/)
    raft_address: str = ""  # its routing voter's address; "" for a read-only replica
    software_version: str = ""  # the node's ferrymq version ("" from 0.1.0)
    routing_format: int = NEWEST_FORMAT  # the newest routing format its code reads

    def __setstate__(self, fields: dict) -> None:
        """A registration pickled by 0.1.0 names no format: it read format 1 only."""
        self.__dict__.update({"routing_format": PICKLED, **fields})


@dataclass(frozen=True)
class NodeHeartbeat:
    """A node is alive, with its log's end and whether that log is damaged (the flag
    clears once it refilled the cut range from its master)."""

    node_id: str
    max_offset: int
    wall_ms: int
    damaged_log: bool = False


@dataclass(frozen=True)
class MarkNodeDown:
    """The controller saw no heartbeat of ``node_id`` for a lease. Applied only if the
    node's heartbeat count is still ``heartbeats_seen``."""

    node_id: str
    heartbeats_seen: int


@dataclass(frozen=True)
class ElectMaster:
    """Make ``node_id`` the master of ``broker_group`` if its epoch is still
    ``expected_epoch``: the epoch grows by one and the old master leaves the in-sync set.
    ``unclean`` allows a member outside the in-sync set (may lose acknowledged messages);
    its in-sync set restarts as itself alone."""

    broker_group: str
    node_id: str
    expected_epoch: int
    reason: str = ""
    unclean: bool = False


@dataclass(frozen=True)
class AlterInSync:
    """The master of ``broker_group`` (in ``master_epoch``) replaces the in-sync set, if
    nobody changed it since ``expected_in_sync_epoch``."""

    broker_group: str
    master: str
    master_epoch: int
    in_sync: frozenset[str]
    expected_in_sync_epoch: int


@dataclass(frozen=True)
class ReportMasterLost:
    """A slave of ``broker_group`` lost its link to the master of ``epoch``. The
    controller fails the master over early when every in-sync slave says so and the
    master has also stopped heartbeating (a kill -9 is seen in about a second, not a
    lease)."""

    broker_group: str
    reporter: str
    epoch: int
    end_offset: int = -1  # the reporter's log end (-1: not said; reports made before it)


@dataclass(frozen=True)
class ReportMasterFound:
    """A slave that reported the master of ``epoch`` lost is linked to it again: the report
    is withdrawn. A report can be made while a new master is still starting (half a
    second after its election, under load); kept, it later let a short pause in that
    master's heartbeats depose it although its slaves were following it, and an ASYNC
    group lost what it had acknowledged meanwhile (a long chaos run)."""

    broker_group: str
    reporter: str
    epoch: int


@dataclass(frozen=True)
class Tracked:
    """``command`` under a request id that routing remembers with its result (the last
    ``OUTCOMES_KEPT`` of them, ``RoutingState.outcomes``). It makes a command's outcome
    knowable and its retry harmless: a submitter that lost sight of it (the leader changed
    before confirming it) learns after a read barrier whether it was applied and what it
    did, and the same request applied twice acts once (``RoutingReplica.submit``)."""

    request_id: bytes
    command: object


@dataclass(frozen=True)
class CatchUp:
    """Changes nothing. Committed and applied on the replica that submitted it, it proves
    that replica has applied everything routing committed before (a read barrier:
    ``RoutingReplica.catch_up``)."""


@dataclass(frozen=True)
class SetRoutingFormat:
    """Write the Raft log and snapshots in ``routing_format`` from the next entry on
    (``ferrymq cluster finalize-upgrade``). Refused while a registered node's code does not
    read it, and for a format older than the current one: a node of an older release could
    no longer follow the log, so this is the step after which a downgrade is not possible."""

    routing_format: int


@dataclass(frozen=True)
class CreateTopic:
    """``queue_count`` queues on each of ``broker_groups`` (every known group when empty)."""

    name: str
    queue_count: int
    broker_groups: tuple[str, ...] = ()
    message_type: MessageType = MessageType.NORMAL
    permission: Permission = Permission.READ_WRITE
    lite_expiration_minutes: int = LITE_EXPIRATION_NEVER


@dataclass(frozen=True)
class UpdateTopic:
    """Grow a topic (queues are never removed: their messages would become unreachable),
    spread it to more broker groups, or change its permission or lite expiration
    (``lite_expiration_minutes`` None: as it is; also every command logged before the
    field existed)."""

    name: str
    queue_count: int
    broker_groups: tuple[str, ...] = ()
    permission: Permission = Permission.READ_WRITE
    lite_expiration_minutes: int | None = None


@dataclass(frozen=True)
class DeleteTopic:
    name: str


@dataclass(frozen=True)
class CreateGroup:
    """``on_first_use``: a node creates the group because a consumer used it (RocketMQ's
    autoCreateSubscriptionGroup): an existing group is then the answer, not an error, and
    the command is refused once the cluster has ``FIRST_USE_GROUPS_MAX`` groups."""

    name: str
    max_delivery_attempts: int
    fifo: bool = False
    on_first_use: bool = False
    lite_exclusive: bool = False


@dataclass(frozen=True)
class UpdateGroup:
    """Change an existing group in place: each field None stays as it is. Held to the
    checks of ``CreateGroup`` (``check_group_config``). Newer than 0.1.0, which cannot
    unpickle it: refused (``UPGRADE_NOT_FINALIZED``) while such a node may follow the log.
    What a change means for the deliveries in flight: docs/architecture.md, "Updating a
    consumer group"."""

    name: str
    max_delivery_attempts: int | None = None
    fifo: bool | None = None
    lite_exclusive: bool | None = None


@dataclass(frozen=True)
class DeleteGroup:
    name: str


@dataclass(frozen=True)
class CreateUser:
    """``sealed_secret`` was sealed by the node that took the request (the plain secret
    never enters the Raft log)."""

    access_key: str
    sealed_secret: bytes = field(repr=False)
    admin: bool = False


@dataclass(frozen=True)
class UpdateUser:
    """Replace a user's secret (when ``sealed_secret`` is not empty) and its admin flag
    (when ``admin`` is not None): an update that names neither keeps both."""

    access_key: str
    sealed_secret: bytes = field(default=b"", repr=False)
    admin: bool | None = None


@dataclass(frozen=True)
class DeleteUser:
    access_key: str


@dataclass(frozen=True)
class GrantAcl:
    """Add ``entry`` to a user's rules (granting one it has already changes nothing)."""

    access_key: str
    entry: AclEntry


@dataclass(frozen=True)
class RevokeAcl:
    """Remove exactly ``entry`` from a user's rules."""

    access_key: str
    entry: AclEntry


Command = (
    RegisterNode
    | NodeHeartbeat
    | MarkNodeDown
    | ElectMaster
    | AlterInSync
    | ReportMasterLost
    | ReportMasterFound
    | CatchUp
    | CreateTopic
    | UpdateTopic
    | DeleteTopic
    | CreateGroup
    | UpdateGroup
    | DeleteGroup
    | CreateUser
    | UpdateUser
    | DeleteUser
    | GrantAcl
    | RevokeAcl
    | SetRoutingFormat
)
