"""The routing state: who serves what, and the deterministic rules that change it.

``RoutingState.apply`` is the state machine that Raft replicates. It is pure: the result
depends only on the state and the command, so every replica that applies the same log
holds the same state. ``RoutingState.check`` runs the same rules without changing
anything, which lets a node refuse a bad request before it costs a Raft round.

Invariants (asserted after every change):
- a topic's queues name only known broker groups, each with 1..QUEUES_MAX queues;
- a broker group's master, when set, is one of its members;
- a member's broker group exists;
- a user is stored under its access key, has a sealed secret and distinct ACL entries;
- ``outcomes`` holds at most ``OUTCOMES_KEPT`` results, the most recent requests'.

Thread-safety: the replica (``routing.replica``) applies commands on the Raft thread under
its lock. ``apply`` never changes a table (``topics``, ``groups``, ``broker_groups``,
``members``, ``users``) in place: it builds a new dict and replaces the attribute, and
records are frozen. So a reader on another thread (the node's event loop) that takes a
table once holds a snapshot nothing will change, and may iterate it without the lock;
reads that must agree across tables take the lock (``RoutingReplica.read``). The one
exception is ``outcomes``, changed in place and read only under the lock.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from routing.acl import ACL_ENTRIES_MAX, User, check_access_key, check_entry
from routing.commands import (
    AlterInSync,
    CatchUp,
    CommandResult,
    CreateGroup,
    CreateTopic,
    CreateUser,
    DeleteGroup,
    DeleteTopic,
    DeleteUser,
    ElectMaster,
    GrantAcl,
    MarkNodeDown,
    NodeHeartbeat,
    RegisterNode,
    ReportMasterFound,
    ReportMasterLost,
    RevokeAcl,
    SetRoutingFormat,
    Tracked,
    UpdateGroup,
    UpdateTopic,
    UpdateUser,
)
from routing.formats import NEWEST_FORMAT, PICKLED, PICKLED_MESSAGE_TYPES
from routing.metadata import (
    DLQ_PREFIX,
    FIRST_USE_GROUPS_MAX,
    NODE_NAME_PATTERN,
    QUEUES_MAX,
    RETRY_PREFIX,
    BrokerGroup,
    GroupConfig,
    Member,
    MessageType,
    TopicConfig,
    TopicError,
    TopicRoute,
    check_group_config,
    check_lite_expiration,
    check_name,
    check_topic_config,
    healthy_first,
    may_leave_in_sync,
)

# A change: (table name, key, new record or None to delete), or (setting, "", new value).
Change = tuple[str, str, Any]
SETTINGS = frozenset({"routing_format", "awaits_finalize"})
# How many tracked requests' results routing remembers: a submitter asks within seconds of
# submitting, and at a few heartbeats a second per node this covers minutes.
OUTCOMES_KEPT = 1024


class RoutingState:
    def __init__(self) -> None:
        self.topics: dict[str, TopicRoute] = {}
        self.groups: dict[str, GroupConfig] = {}
        self.broker_groups: dict[str, BrokerGroup] = {}
        self.members: dict[str, Member] = {}
        self.users: dict[str, User] = {}
        self.applied = 0  # commands applied, successful or not
        # request id -> result of the last OUTCOMES_KEPT tracked commands, oldest first
        self.outcomes: dict[bytes, CommandResult] = {}
        # The format the log and snapshots are written in (routing/formats.py), and whether
        # a node of an older release registered: then only an operator moves the format
        # on (finalizing the upgrade), and until then commands are written as it reads them.
        self.routing_format = PICKLED
        self.awaits_finalize = False

    def __setstate__(self, fields: dict) -> None:
        """Pickled snapshots written before users, tracked requests or routing formats
        existed load with none (format 1)."""
        self.__dict__.update(fields)
        self.__dict__.setdefault("users", {})
        self.__dict__.setdefault("outcomes", {})
        self.__dict__.setdefault("routing_format", PICKLED)
        members = self.__dict__.get("members", {}).values()
        self.__dict__.setdefault(
            "awaits_finalize", any(m.routing_format < NEWEST_FORMAT for m in members)
        )

    # ---- the state machine -------------------------------------------------------------
    def apply(self, command: object) -> CommandResult:
        """Apply one committed command. Refused commands change nothing; a tracked request
        already applied is not applied again, and answers what it did the first time."""
        if type(command) is Tracked:
            return self._apply_tracked(command)
        self.applied += 1
        try:
            changes, value = self._plan(command)
        except TopicError as error:
            return CommandResult(False, error.reason, error.detail)
        replaced: dict[str, dict] = {}
        for table, key, record in changes:
            if table in SETTINGS:  # a value of the state's own, not a table's record
                setattr(self, table, record)
                continue
            records = replaced.get(table)
            if records is None:
                records = replaced[table] = dict(getattr(self, table))  # copy on write
            if record is None:
                records.pop(key, None)
            else:
                records[key] = record
        for table, records in replaced.items():
            setattr(self, table, records)
        self._assert_invariants(replaced, changes)
        return CommandResult(True, value=value)

    def _apply_tracked(self, tracked: Tracked) -> CommandResult:
        known = self.outcomes.get(tracked.request_id)
        if known is not None:
            return known
        result = self.apply(tracked.command)
        self.outcomes[tracked.request_id] = result
        if len(self.outcomes) > OUTCOMES_KEPT:
            del self.outcomes[next(iter(self.outcomes))]
        assert len(self.outcomes) <= OUTCOMES_KEPT
        return result

    def outcome(self, request_id: bytes) -> CommandResult | None:
        """What the tracked request ``request_id`` did, None if it was not applied (or so
        long ago that it was forgotten)."""
        return self.outcomes.get(request_id)

    def check(self, command: object) -> None:
        """``TopicError`` if ``command`` would be refused now."""
        self._plan(command)

    def _plan(self, command: object) -> tuple[list[Change], object]:
        planner = _PLANNERS.get(type(command))
        if planner is None:
            raise TopicError("UNKNOWN_COMMAND", f"not a routing command: {type(command).__name__}")
        return planner(self, command)

    # ---- planners: validate and say what changes ---------------------------------------
    def _plan_register(self, command: RegisterNode) -> tuple[list[Change], object]:
        if not NODE_NAME_PATTERN.fullmatch(command.node_id):
            raise TopicError("ILLEGAL_NODE", f"node id {command.node_id!r} is not [a-zA-Z0-9_.-]")
        if not NODE_NAME_PATTERN.fullmatch(command.broker_group):
            raise TopicError(
                "ILLEGAL_BROKER_GROUP", f"broker group {command.broker_group!r} is not legal"
            )
        known = self.members.get(command.node_id)
        if known is not None and known.broker_group != command.broker_group:
            raise TopicError(
                "NODE_GROUP_MISMATCH",
                f"node {command.node_id} belongs to broker group {known.broker_group}, "
                f"not {command.broker_group}",
            )
        member = Member(
            node_id=command.node_id,
            broker_group=command.broker_group,
            grpc_address=command.grpc_address,
            ha_address=command.ha_address,
            metrics_address=command.metrics_address,
            alive=True,
            heartbeats=(known.heartbeats + 1) if known else 1,
            last_heartbeat_ms=command.wall_ms,
            max_offset=command.max_offset,
            damaged_log=command.damaged_log,
            remoting_address=command.remoting_address,
            raft_address=command.raft_address,
            software_version=command.software_version,
            routing_format=command.routing_format,
        )
        group = self.broker_groups.get(command.broker_group) or BrokerGroup(command.broker_group)
        if group.master is None:
            # First election: nobody else can hold data of this group yet.
            group = replace(
                group,
                master=command.node_id,
                epoch=group.epoch + 1,
                in_sync=frozenset({command.node_id}),
                in_sync_epoch=group.in_sync_epoch + 1,
            )
        elif group.master == command.node_id:
            successor = self._successor_of_restarted_master(group, command)
            if successor is not None:
                group = replace(
                    group,
                    master=successor,
                    epoch=group.epoch + 1,
                    in_sync=group.in_sync - {command.node_id},
                    in_sync_epoch=group.in_sync_epoch + 1,
                    lost_by=frozenset(),
                    lost_ends=(),
                )
            else:
                # It stays master, in a new term: a term never spans a restart. After a
                # power loss its log may be shorter than before, and what it writes next
                # must not share an epoch with the bytes a slave copied from the lost
                # tail, or the slave's epoch comparison would keep them (a silently
                # diverged replica, found by the chaos suite).
                # Lost-master reports name an epoch: none carries over to the new one.
                group = replace(group, epoch=group.epoch + 1, lost_by=frozenset(), lost_ends=())
        elif self._replaces_damaged_master(group, member):
            # The master's recovery cut its log and nothing refilled it: a healthy
            # in-sync member takes over as it registers, before it follows (and cuts its
            # own longer log to) the damaged one.
            group = replace(
                group,
                master=member.node_id,
                epoch=group.epoch + 1,
                in_sync=(group.in_sync - {group.master}) | {member.node_id},
                in_sync_epoch=group.in_sync_epoch + 1,
                lost_by=frozenset(),
                lost_ends=(),
            )
        changes: list[Change] = [
            ("members", member.node_id, member),
            ("broker_groups", group.name, group),
        ]
        if command.routing_format < NEWEST_FORMAT and not self.awaits_finalize:
            changes.append(("awaits_finalize", "", True))  # a node of an older release
        return changes, member

    def _successor_of_restarted_master(
        self, group: BrokerGroup, command: RegisterNode
    ) -> str | None:
        """The in-sync member, heard from within the lease, with the longest log (a
        whole log first)."""
        candidates = [
            member
            for node_id in group.in_sync - {command.node_id}
            if (member := self.members.get(node_id)) is not None
            and member.alive
            and command.wall_ms - member.last_heartbeat_ms <= command.lease_ms
        ]
        if not candidates:
            return None
        candidates = healthy_first(candidates)
        return max(candidates, key=lambda m: (m.max_offset, m.node_id)).node_id

    def _replaces_damaged_master(self, group: BrokerGroup, member: Member) -> bool:
        master = self.members.get(group.master) if group.master else None
        return (
            master is not None
            and master.node_id != member.node_id
            and member.node_id in group.in_sync
            and healthy_first([master, member]) == [member]
        )

    def _plan_heartbeat(self, command: NodeHeartbeat) -> tuple[list[Change], object]:
        known = self.members.get(command.node_id)
        if known is None:
            raise TopicError("UNKNOWN_NODE", f"node {command.node_id} is not registered")
        member = replace(
            known,
            alive=True,
            heartbeats=known.heartbeats + 1,
            last_heartbeat_ms=command.wall_ms,
            max_offset=command.max_offset,
            damaged_log=command.damaged_log,
        )
        return [("members", member.node_id, member)], member

    def _plan_mark_down(self, command: MarkNodeDown) -> tuple[list[Change], object]:
        known = self.members.get(command.node_id)
        if known is None:
            raise TopicError("UNKNOWN_NODE", f"node {command.node_id} is not registered")
        if known.heartbeats != command.heartbeats_seen or not known.alive:
            raise TopicError("STALE", f"node {command.node_id} heartbeated since")
        member = replace(known, alive=False)
        return [("members", member.node_id, member)], member

    def _plan_elect(self, command: ElectMaster) -> tuple[list[Change], object]:
        group = self._broker_group(command.broker_group)
        if group.epoch != command.expected_epoch:
            raise TopicError("STALE", f"epoch is {group.epoch}, not {command.expected_epoch}")
        member = self.members.get(command.node_id)
        if member is None or member.broker_group != group.name:
            raise TopicError("UNKNOWN_NODE", f"{command.node_id} is not in {group.name}")
        if not command.unclean and command.node_id not in group.in_sync:
            raise TopicError(
                "NOT_IN_SYNC",
                f"{command.node_id} is not in the in-sync set {sorted(group.in_sync)} of "
                f"{group.name}; electing it could lose acknowledged messages",
            )
        others = [
            m
            for m in self.members.values()
            if m.broker_group == group.name
            and m.alive
            and m.node_id not in (group.master, member.node_id)
            and (command.unclean or m.node_id in group.in_sync)
        ]
        if member not in healthy_first([member, *others]):
            raise TopicError(
                "DAMAGED_LOG",
                f"{command.node_id}'s recovery cut its log and it has not refilled it, while "
                f"{sorted(m.node_id for m in healthy_first(others))} of {group.name} have a "
                "whole log: elect one of them",
            )
        # Every in-sync member holds every acknowledged write (the master counts all of
        # them), so the survivors stay in sync; an unclean winner starts a set of its own.
        in_sync = (
            frozenset({command.node_id})
            if command.unclean
            else (group.in_sync - {group.master}) | {command.node_id}
        )
        elected = replace(
            group,
            master=command.node_id,
            epoch=group.epoch + 1,
            in_sync=in_sync,
            in_sync_epoch=group.in_sync_epoch + 1,
            lost_by=frozenset(),
            lost_ends=(),
        )
        return [("broker_groups", group.name, elected)], elected

    def _plan_alter_in_sync(self, command: AlterInSync) -> tuple[list[Change], object]:
        group = self._broker_group(command.broker_group)
        if group.master != command.master or group.epoch != command.master_epoch:
            raise TopicError("STALE", f"{command.master} is not the master of epoch {group.epoch}")
        if group.in_sync_epoch != command.expected_in_sync_epoch:
            raise TopicError("STALE", "the in-sync set changed since")
        if command.master not in command.in_sync:
            raise TopicError("ILLEGAL_IN_SYNC", "the master must be in its in-sync set")
        for node_id in command.in_sync:
            member = self.members.get(node_id)
            if member is None or member.broker_group != group.name:
                raise TopicError("UNKNOWN_NODE", f"{node_id} is not in {group.name}")
        master = self.members.get(command.master)
        for node_id in group.in_sync - frozenset(command.in_sync):
            if not may_leave_in_sync(master, self.members.get(node_id)):
                raise TopicError(
                    "DAMAGED_LOG",
                    f"{command.master}'s log was cut by its recovery: {node_id}, whole, "
                    "stays in sync to take the group over",
                )
        changed = replace(
            group, in_sync=frozenset(command.in_sync), in_sync_epoch=group.in_sync_epoch + 1
        )
        return [("broker_groups", group.name, changed)], changed

    def _plan_report_lost(self, command: ReportMasterLost) -> tuple[list[Change], object]:
        group = self._broker_group(command.broker_group)
        if group.epoch != command.epoch:
            raise TopicError("STALE", f"epoch is {group.epoch}, not {command.epoch}")
        ends = tuple((node, end) for node, end in group.lost_ends if node != command.reporter)
        if command.end_offset >= 0:
            ends = (*ends, (command.reporter, command.end_offset))
        changed = replace(group, lost_by=group.lost_by | {command.reporter}, lost_ends=ends)
        return [("broker_groups", group.name, changed)], changed

    def _plan_report_found(self, command: ReportMasterFound) -> tuple[list[Change], object]:
        group = self._broker_group(command.broker_group)
        if group.epoch != command.epoch:
            raise TopicError("STALE", f"epoch is {group.epoch}, not {command.epoch}")
        if command.reporter not in group.lost_by:
            return [], group
        ends = tuple((node, end) for node, end in group.lost_ends if node != command.reporter)
        changed = replace(group, lost_by=group.lost_by - {command.reporter}, lost_ends=ends)
        return [("broker_groups", group.name, changed)], changed

    def _plan_catch_up(self, command: CatchUp) -> tuple[list[Change], object]:
        return [], None

    def _plan_set_routing_format(self, command: SetRoutingFormat) -> tuple[list[Change], object]:
        wanted = command.routing_format
        if wanted < self.routing_format:
            raise TopicError(
                "FORMAT_DOWNGRADE",
                f"routing format is {self.routing_format}; it never goes back to {wanted}",
            )
        if wanted > NEWEST_FORMAT:
            raise TopicError("UNKNOWN_FORMAT", f"routing format {wanted} is not known here")
        behind = sorted(
            f"{m.node_id} ({m.software_version or '0.1.0 or older'})"
            for m in self.members.values()
            if m.routing_format < wanted
        )
        if behind:
            raise TopicError(
                "NODES_NOT_UPGRADED",
                f"routing format {wanted} needs every node to read it; these do not yet: "
                + ", ".join(behind)
                + " (upgrade them and let them register, then finalize again)",
            )
        return [("routing_format", "", wanted), ("awaits_finalize", "", False)], None

    def _broker_group(self, name: str) -> BrokerGroup:
        group = self.broker_groups.get(name)
        if group is None:
            raise TopicError("UNKNOWN_BROKER_GROUP", f"broker group {name} is not known")
        return group

    def _plan_create_topic(self, command: CreateTopic) -> tuple[list[Change], object]:
        check_topic_config(command.name, command.queue_count)
        if self.awaits_finalize and command.message_type.value not in PICKLED_MESSAGE_TYPES:
            raise TopicError(
                "UPGRADE_NOT_FINALIZED",
                f"{command.message_type.value} topics wait until every node runs this release "
                "and the upgrade is finalized (ferrymq cluster finalize-upgrade)",
            )
        check_lite_expiration(command.message_type, command.lite_expiration_minutes)
        if command.name in self.topics:
            raise TopicError("TOPIC_EXISTS", f"topic {command.name} already exists")
        groups = self._broker_groups_named(command.broker_groups)
        route = TopicRoute(
            command.name,
            tuple((group, command.queue_count) for group in groups),
            command.message_type,
            command.permission,
            command.lite_expiration_minutes,
        )
        return [("topics", route.name, route)], route

    def _plan_update_topic(self, command: UpdateTopic) -> tuple[list[Change], object]:
        current = self.topic(command.name)
        check_topic_config(command.name, command.queue_count)
        expiration = command.lite_expiration_minutes
        if expiration is None:
            expiration = current.lite_expiration_minutes
        check_lite_expiration(current.message_type, expiration)
        queues = dict(current.queues)
        for group in self._broker_groups_named(command.broker_groups or tuple(queues)):
            if command.queue_count < queues.get(group, 0):
                raise TopicError(
                    "ILLEGAL_TOPIC",
                    "queues cannot be removed: their messages would become unreachable",
                )
            queues[group] = command.queue_count
        route = replace(
            current,
            queues=tuple(sorted(queues.items())),
            permission=command.permission,
            lite_expiration_minutes=expiration,
        )
        return [("topics", route.name, route)], route

    def _plan_delete_topic(self, command: DeleteTopic) -> tuple[list[Change], object]:
        self.topic(command.name)
        return [("topics", command.name, None)], None

    def _plan_create_group(self, command: CreateGroup) -> tuple[list[Change], object]:
        config = GroupConfig(
            command.name, command.max_delivery_attempts, command.fifo, command.lite_exclusive
        )
        check_group_config(config)
        if command.on_first_use:
            existing = self.groups.get(command.name)
            if existing is not None:
                return [], existing
            if len(self.groups) >= FIRST_USE_GROUPS_MAX:
                raise TopicError(
                    "GROUP_LIMIT",
                    f"group {command.name} does not exist and is not created on first use: "
                    f"the cluster has {len(self.groups)} groups, the limit for that is "
                    f"{FIRST_USE_GROUPS_MAX} (create it with `ferrymq group create`)",
                )
        if command.name in self.groups:
            raise TopicError("GROUP_EXISTS", f"group {command.name} already exists")
        return [("groups", config.name, config)], config

    def _plan_update_group(self, command: UpdateGroup) -> tuple[list[Change], object]:
        updated = updated_group(self.group(command.name), command)
        check_group_config(updated)
        if self.awaits_finalize:
            # A node of 0.1.0 cannot unpickle this command: it would stop its Raft thread.
            raise TopicError(
                "UPGRADE_NOT_FINALIZED",
                "updating a group waits until every node runs this release and the upgrade "
                "is finalized (ferrymq cluster finalize-upgrade)",
            )
        return [("groups", updated.name, updated)], updated

    def _plan_delete_group(self, command: DeleteGroup) -> tuple[list[Change], object]:
        self.group(command.name)
        return [("groups", command.name, None)], None

    def _plan_create_user(self, command: CreateUser) -> tuple[list[Change], object]:
        check_access_key(command.access_key)
        if command.access_key in self.users:
            raise TopicError("USER_EXISTS", f"user {command.access_key} already exists")
        if not command.sealed_secret:
            raise TopicError("ILLEGAL_USER", "a user needs a secret key")
        user = User(command.access_key, command.sealed_secret, command.admin)
        return [("users", user.access_key, user)], user

    def _plan_update_user(self, command: UpdateUser) -> tuple[list[Change], object]:
        user = self.user(command.access_key)
        user = replace(
            user,
            sealed_secret=command.sealed_secret or user.sealed_secret,
            admin=user.admin if command.admin is None else command.admin,
        )
        return [("users", user.access_key, user)], user

    def _plan_delete_user(self, command: DeleteUser) -> tuple[list[Change], object]:
        self.user(command.access_key)
        return [("users", command.access_key, None)], None

    def _plan_grant_acl(self, command: GrantAcl) -> tuple[list[Change], object]:
        user = self.user(command.access_key)
        check_entry(command.entry)
        if command.entry in user.acl:
            return [], user
        if len(user.acl) >= ACL_ENTRIES_MAX:
            raise TopicError("ILLEGAL_ACL", f"a user has at most {ACL_ENTRIES_MAX} ACL entries")
        user = replace(user, acl=(*user.acl, command.entry))
        return [("users", user.access_key, user)], user

    def _plan_revoke_acl(self, command: RevokeAcl) -> tuple[list[Change], object]:
        user = self.user(command.access_key)
        if command.entry not in user.acl:
            raise TopicError("ACL_NOT_FOUND", f"user {user.access_key} has no rule {command.entry}")
        user = replace(user, acl=tuple(e for e in user.acl if e != command.entry))
        return [("users", user.access_key, user)], user

    # ---- reads -------------------------------------------------------------------------
    def user(self, access_key: str) -> User:
        found = self.users.get(access_key)
        if found is None:
            raise TopicError("USER_NOT_FOUND", f"user {access_key} does not exist")
        return found

    def topic(self, name: str) -> TopicRoute:
        check_name("TOPIC", name)
        found = self.topics.get(name)
        if found is None and name.startswith(DLQ_PREFIX):
            found = self.dead_letter_route(name[len(DLQ_PREFIX) :])
        if found is None and name.startswith(RETRY_PREFIX):
            found = self.retry_route(name[len(RETRY_PREFIX) :])
        if found is None:
            raise TopicError("TOPIC_NOT_FOUND", f"topic {name} does not exist")
        return found

    def group(self, name: str) -> GroupConfig:
        check_name("CONSUMER_GROUP", name)
        found = self.groups.get(name)
        if found is None:
            raise TopicError("CONSUMER_GROUP_NOT_FOUND", f"group {name} does not exist")
        return found

    def dead_letter_route(self, group: str) -> TopicRoute | None:
        """``%DLQ%<group>`` exists for every consumer group: one queue on every broker
        group, where the messages that failed there are kept."""
        if group not in self.groups:
            return None
        return TopicRoute(DLQ_PREFIX + group, tuple((g, 1) for g in sorted(self.broker_groups)))

    def retry_route(self, group: str) -> TopicRoute | None:
        """``%RETRY%<group>`` exists for every consumer group, like its dead-letter topic:
        one queue on every broker group, where the group's 4.x consumers' failed messages
        wait for their next attempt (RocketMQ's clients subscribe to it). Untyped: the
        copies there arrive delayed."""
        if group not in self.groups:
            return None
        queues = tuple((g, 1) for g in sorted(self.broker_groups))
        return TopicRoute(RETRY_PREFIX + group, queues, MessageType.UNSPECIFIED)

    def topics_on(self, broker_group: str) -> dict[str, TopicConfig]:
        """Every topic with queues on ``broker_group`` (the groups' retry and dead-letter
        topics included), as that group serves it."""
        served = {}
        for route in self.topics.values():
            config = route.on(broker_group)
            if config is not None:
                served[route.name] = config
        if broker_group in self.broker_groups:
            for group in self.groups:
                for config in group_topics(group):
                    served[config.name] = config
        return served

    def master_of(self, broker_group: str) -> Member | None:
        group = self.broker_groups.get(broker_group)
        if group is None or group.master is None:
            return None
        return self.members.get(group.master)

    def _broker_groups_named(self, names: tuple[str, ...]) -> list[str]:
        if not names:
            if not self.broker_groups:
                raise TopicError("NO_BROKER_GROUP", "no broker group has registered yet")
            return sorted(self.broker_groups)
        for name in names:
            if name not in self.broker_groups:
                raise TopicError("UNKNOWN_BROKER_GROUP", f"broker group {name} is not known")
        if len(set(names)) != len(names):
            raise TopicError("ILLEGAL_TOPIC", "a broker group is named twice")
        return sorted(names)

    def _assert_invariants(self, replaced: dict[str, dict], changes: list[Change]) -> None:
        """The state's invariants after a change. Topics are checked where they can have
        broken: every route when the broker groups changed, else the routes changed (a
        cluster of 10,000 topics must not walk them all for each heartbeat)."""
        if "broker_groups" in replaced:
            routes = self.topics.values()
        else:
            routes = [record for table, _, record in changes if table == "topics" and record]
        for route in routes:
            assert route.queues, route
            for group, count in route.queues:
                assert group in self.broker_groups, (route, group)
                assert 1 <= count <= QUEUES_MAX, route
        for group in self.broker_groups.values():
            assert group.master is None or group.master in self.members, group
            assert group.master is None or group.master in group.in_sync, group
            assert {node for node, _ in group.lost_ends} <= group.lost_by, group
        for member in self.members.values():
            assert member.broker_group in self.broker_groups, member
        for key, user in self.users.items():
            assert key == user.access_key and user.sealed_secret, key
            assert len(set(user.acl)) == len(user.acl), user


def updated_group(current: GroupConfig, update: UpdateGroup) -> GroupConfig:
    """``current`` with what ``update`` names (a field None stays as it is), unchecked."""
    return replace(
        current,
        max_delivery_attempts=current.max_delivery_attempts
        if update.max_delivery_attempts is None
        else update.max_delivery_attempts,
        fifo=current.fifo if update.fifo is None else update.fifo,
        lite_exclusive=current.lite_exclusive
        if update.lite_exclusive is None
        else update.lite_exclusive,
    )


def group_topics(group: str) -> tuple[TopicConfig, TopicConfig]:
    """The dead-letter and retry topics consumer group ``group`` has on every broker group."""
    retry = RETRY_PREFIX + group
    return TopicConfig(DLQ_PREFIX + group, 1), TopicConfig(retry, 1, MessageType.UNSPECIFIED)


_PLANNERS = {
    RegisterNode: RoutingState._plan_register,
    NodeHeartbeat: RoutingState._plan_heartbeat,
    MarkNodeDown: RoutingState._plan_mark_down,
    ElectMaster: RoutingState._plan_elect,
    AlterInSync: RoutingState._plan_alter_in_sync,
    ReportMasterLost: RoutingState._plan_report_lost,
    ReportMasterFound: RoutingState._plan_report_found,
    CatchUp: RoutingState._plan_catch_up,
    CreateTopic: RoutingState._plan_create_topic,
    UpdateTopic: RoutingState._plan_update_topic,
    DeleteTopic: RoutingState._plan_delete_topic,
    CreateGroup: RoutingState._plan_create_group,
    UpdateGroup: RoutingState._plan_update_group,
    DeleteGroup: RoutingState._plan_delete_group,
    CreateUser: RoutingState._plan_create_user,
    UpdateUser: RoutingState._plan_update_user,
    DeleteUser: RoutingState._plan_delete_user,
    GrantAcl: RoutingState._plan_grant_acl,
    RevokeAcl: RoutingState._plan_revoke_acl,
    SetRoutingFormat: RoutingState._plan_set_routing_format,
}
