"""The console's JSON API: each endpoint is a call of the node's services with the session's
``Caller`` (``Door.CONSOLE``), translated to JSON. Nothing here decides who may do what:
the services do (``node/services/permissions.py``), for this door as for every other, and
their refusal is the answer (``refusal``).

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import itertools
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ferrymq.protocol.ferrymq import admin_pb2 as api
from node.console.dead_letters import DeadLetterEndpoints
from node.console.direct_consume import DirectConsumeEndpoint
from node.console.masters import MasterReads
from node.console.node_config import NodeConfigEndpoint
from node.console.sends import SendEndpoint
from node.rpc_status import AccessDenied, InvalidRequest
from node.services.admin import AdminRefused, ClusterSnapshot, TopicSpec
from node.services.caller import Caller
from node.services.offset_reset import MAX_TIME_MS, ResetRequest, ResetTarget
from node.services.registry import Services
from routing.acl import AclEntry, Action, Effect, ResourceKind, User
from routing.metadata import GroupConfig, Member, MessageType, Permission, TopicRoute
from routing.replica import RaftStatus

PAGE_SIZE_MAX = 500
PAGE_SIZE_DEFAULT = 50
FAILOVERS_KEPT = 32  # finished failovers a page may still ask about
TIME_RANGE_MAX = 64  # messages a time-range search reads from each queue, and answers
KEY_MATCHES_MAX = 32  # messages a search by key answers per broker group
# google.rpc codes (AdminRefused) as HTTP statuses.
HTTP_OF_CODE = {3: 400, 5: 404, 6: 409, 9: 409, 14: 503}
TYPES = {kind.value: kind for kind in MessageType}
PERMISSIONS = {p.value: p for p in Permission}


class ApiError(Exception):
    """An answer other than 200: ``status`` and the reason shown to the user."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def refusal(error: Exception) -> ApiError:
    """A service's refusal as the HTTP answer, with the service's own reason."""
    if isinstance(error, AccessDenied):
        return ApiError(403 if error.authenticated else 401, str(error))
    if isinstance(error, AdminRefused):
        return ApiError(HTTP_OF_CODE.get(error.code, 400), error.message)
    if isinstance(error, InvalidRequest):
        return ApiError(400, str(error))
    raise error


def json_body(body: bytes) -> dict:
    try:
        value = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the body must be a JSON object") from None
    if not isinstance(value, dict):
        raise ApiError(400, "the body must be a JSON object")
    return value


def integer(value: object, name: str, low: int, high: int) -> int:
    """``value`` (a JSON number or a query string) as an int in ``low..high``."""
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ApiError(400, f"{name} must be an integer in {low}..{high}")
    return value


def text(value: object, name: str, max_chars: int = 1024) -> str:
    if not isinstance(value, str) or len(value) > max_chars:
        raise ApiError(400, f"{name} must be a string of at most {max_chars} characters")
    return value


def cluster_json(snapshot: ClusterSnapshot) -> dict:
    """ClusterStatus's content, with each node's lag behind its master in bytes."""
    groups = {g.name: g for g in snapshot.broker_groups}
    ends = {m.node_id: m.max_offset for m in snapshot.members}
    nodes = []
    for member in sorted(snapshot.members, key=lambda m: (m.broker_group, m.node_id)):
        group = groups.get(member.broker_group)
        master = group.master if group is not None else None
        is_master = master == member.node_id
        lag = 0 if is_master or master not in ends else max(0, ends[master] - member.max_offset)
        nodes.append(
            {
                "id": member.node_id,
                "broker_group": member.broker_group,
                "role": "MASTER" if is_master else "SLAVE",
                "alive": member.alive,
                "address": member.grpc_address,
                "remoting_address": member.remoting_address,
                "max_offset": member.max_offset,
                "lag_bytes": lag,
                "in_sync": group is not None and member.node_id in group.in_sync,
                "epoch": group.epoch if group is not None else 0,
                "last_heartbeat_ms": member.last_heartbeat_ms,
                "damaged_log": member.damaged_log,
                "software_version": member.software_version,
                "routing_format": member.routing_format,
            }
        )
    raft = snapshot.raft
    return {
        "answered_by": snapshot.answered_by,
        "routing_format": snapshot.routing_format,
        "raft": {
            "leader": raft.leader,
            "term": raft.term,
            "commit_index": raft.commit_index,
            "has_quorum": raft.has_quorum,
            "voters": voters_json(raft),
        },
        "broker_groups": [
            {
                "name": g.name,
                "master": g.master or "",
                "epoch": g.epoch,
                "in_sync": sorted(g.in_sync),
                "in_sync_epoch": g.in_sync_epoch,
            }
            for g in sorted(snapshot.broker_groups, key=lambda g: g.name)
        ],
        "nodes": nodes,
    }


def voters_json(raft: RaftStatus) -> list[dict]:
    """Every voter as this node's Raft sees it (itself included when it votes)."""
    voters = [
        {"address": address, "reachable": reachable, "leader": address == raft.leader}
        for address, reachable in raft.voters_connected
    ]
    if raft.voter:
        voters.append(
            {
                "address": raft.self_address,
                "reachable": True,
                "leader": raft.self_address == raft.leader,
            }
        )
    return sorted(voters, key=lambda v: v["address"])


def topic_json(route: TopicRoute) -> dict:
    return {
        "name": route.name,
        "message_type": route.message_type.value,
        "permission": route.permission.value,
        "queues": [{"broker_group": group, "count": count} for group, count in route.queues],
        "lite_expiration_minutes": route.lite_expiration_minutes,
    }


def topic_spec(body: dict, name: str | None = None) -> TopicSpec:
    """A topic as the page sends it (create: ``name`` in the body; update: in the path)."""
    topic_name = name if name is not None else text(body.get("name"), "name", 255)
    type_name = body.get("message_type") or None
    if type_name is not None and type_name not in TYPES:
        raise ApiError(400, f"message_type must be one of {', '.join(TYPES)}")
    permission = body.get("permission") or "READ_WRITE"
    if permission not in PERMISSIONS:
        raise ApiError(400, f"permission must be one of {', '.join(PERMISSIONS)}")
    groups = body.get("broker_groups") or []
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise ApiError(400, "broker_groups must be a list of broker group names")
    return TopicSpec(
        name=topic_name,
        queue_count=integer(body.get("queue_count", 0), "queue_count", 1, 1024),
        broker_groups=tuple(groups),
        message_type=TYPES[type_name] if type_name else None,
        permission=PERMISSIONS[permission],
    )


@dataclass
class FailoverProgress:
    """One planned failover the console asked for, as its page follows it."""

    id: int
    broker_group: str
    target: str
    started_ms: int
    state: str = "running"  # running, done, failed
    new_master: str = ""
    epoch: int = 0
    writes_unavailable_ms: int = 0
    reason: str = ""
    finished_ms: int = 0
    asked_by: str = ""  # the caller's identity: only who asked follows it
    task: asyncio.Task | None = field(default=None, repr=False)

    def as_json(self) -> dict:
        now = int(time.time() * 1000)
        return {
            "id": self.id,
            "broker_group": self.broker_group,
            "target": self.target,
            "state": self.state,
            "elapsed_ms": (self.finished_ms or now) - self.started_ms,
            "new_master": self.new_master,
            "epoch": self.epoch,
            "writes_unavailable_ms": self.writes_unavailable_ms,
            "reason": self.reason,
        }


# (caller, master's node id, master's client address, broker group, target) ->
# (new master, epoch, ms writes were paused): on this node when it is the master, else
# handed to the master's Admin door (node/server.py builds it).
# (caller, the group's master, broker group, target node) -> (new master, epoch, paused ms)
FailoverRunner = Callable[[Caller, Member, str, str], Awaitable[tuple[str, int, int]]]


@dataclass(frozen=True, slots=True)
class ApiCall:
    """What an endpoint gets besides the caller: the query, the body (read as JSON only by
    the endpoints that take one) and the path's parts its pattern captured."""

    query: dict[str, str]
    body: bytes
    params: tuple[str, ...]

    def json(self) -> dict:
        return json_body(self.body)


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    pattern: re.Pattern
    handler: Callable[[Caller, ApiCall], object]  # a JSON value, or an awaitable of one


NAME = "([^/]+)"  # a topic, group or user name in a path (the services check the name)


class ConsoleApi:
    """The endpoints; ``node_facts`` is what this node says of itself (version, ports)."""

    def __init__(
        self,
        services: Services,
        node_facts: Callable[[], dict],
        run_failover: FailoverRunner,
        retention_ms: int,
        segment_bytes: int,
        masters: MasterReads,
    ) -> None:
        """``masters``: where a broker group's store is read (``masters.py``)."""
        self.services = services
        self.masters = masters
        self.admin = services.admin
        self.node_facts = node_facts
        self.run_failover = run_failover
        self.retention_ms = retention_ms
        self.segment_bytes = segment_bytes
        self.failovers: dict[int, FailoverProgress] = {}
        self._failover_ids = itertools.count(1)
        self.routes = [
            Route(method, re.compile("/api/" + pattern), handler)
            for method, pattern, handler in (
                ("GET", "cluster", self.cluster),
                ("POST", "failover", self.start_failover),
                ("GET", r"failover/(\d+)", self.failover_progress),
                ("GET", "topics", self.topics),
                ("POST", "topics", self.create_topic),
                ("GET", f"topics/{NAME}", self.topic),
                ("PUT", f"topics/{NAME}", self.update_topic),
                ("DELETE", f"topics/{NAME}", self.delete_topic),
                ("GET", "groups", self.groups),
                ("POST", "groups", self.create_group),
                ("GET", f"groups/{NAME}", self.group),
                ("PUT", f"groups/{NAME}", self.update_group),
                ("DELETE", f"groups/{NAME}", self.delete_group),
                ("POST", f"groups/{NAME}/reset", self.reset_offsets),
                ("GET", "messages", self.messages),
                ("GET", "messages/history", self.message_history),
                ("GET", "users", self.users),
                ("POST", "users", self.create_user),
                ("PUT", f"users/{NAME}", self.update_user),
                ("DELETE", f"users/{NAME}", self.delete_user),
                ("POST", f"users/{NAME}/grant", self.grant),
                ("POST", f"users/{NAME}/revoke", self.revoke),
            )
        ]
        self._add_dead_letter_routes(services)

    async def producers(self, caller: Caller, call: ApiCall) -> dict:
        """Online producers per producer group, each broker group's master asked: a
        client listed once per group, with the broker groups it heartbeats to."""
        by_group: dict[str, dict[str, dict]] = {}
        for broker_group in [g.name for g in self.admin.cluster(caller).broker_groups]:
            for entry in await self.masters.producers(caller, broker_group):
                clients = by_group.setdefault(entry["group"], {})
                for client in entry["clients"]:
                    known = clients.setdefault(client["client_id"], {**client, "broker_groups": []})
                    known["broker_groups"].append(broker_group)
        return {
            "groups": [
                {"group": group, "clients": [clients[c] for c in sorted(clients)]}
                for group, clients in sorted(by_group.items())
            ]
        }

    def _add_dead_letter_routes(self, services: Services) -> None:
        """A group's dead letters and their resend (``dead_letters.py``), the online
        producers, a topic's test message (``sends.py``), a node's configuration
        (``node_config.py``) and a message consumed directly (``direct_consume.py``)."""
        endpoints = DeadLetterEndpoints(
            services.dead_letter_resend, integer, text, lambda reason: ApiError(400, reason)
        )
        for method, pattern, handler in endpoints.routes():
            self.routes.append(Route(method, re.compile("/api/" + pattern), handler))
        self.routes.append(Route("GET", re.compile("/api/producers"), self.producers))
        sends = SendEndpoint(services, self.masters, text, ApiError, refusal)
        node_config = NodeConfigEndpoint(services.node_settings, self.masters.peers)
        direct = DirectConsumeEndpoint(
            services,
            self.masters.node_id,
            self.masters.peers,
            text,
            lambda reason: ApiError(400, reason),
        )
        for method, pattern, handler in [
            *sends.routes(),
            *node_config.routes(),
            *direct.routes(),
        ]:
            self.routes.append(Route(method, re.compile("/api/" + pattern), handler))

    # ---- cluster -------------------------------------------------------------------------
    def cluster(self, caller: Caller, call: ApiCall) -> dict:
        answer = cluster_json(self.admin.cluster(caller))
        answer["this_node"] = self.node_facts()
        try:
            figures = self.admin.runtime(caller)
        except AccessDenied:
            figures = None  # the node's figures are admins' (mqadmin's rule)
        if figures is not None:
            answer["this_node"]["figures"] = {
                "is_master": figures.is_master,
                "put_rates": list(figures.put_rates),
                "got_rates": list(figures.got_rates),
                "put_total": figures.put_total,
                "got_total": figures.got_total,
                "sends_open": figures.sends_open,
            }
        return answer

    def start_failover(self, caller: Caller, call: ApiCall) -> dict:
        body = call.json()
        broker_group = text(body.get("broker_group"), "broker_group", 255)
        target = text(body.get("target_node", ""), "target_node", 255)
        master = self.admin.master_of(caller, broker_group)
        if master is None:
            raise ApiError(503, f"broker group {broker_group} has no master now")
        progress = FailoverProgress(
            next(self._failover_ids),
            broker_group,
            target,
            int(time.time() * 1000),
            asked_by=caller.identity,
        )
        progress.task = asyncio.ensure_future(self._follow(progress, caller, master))
        self.failovers[progress.id] = progress
        for old in sorted(self.failovers)[:-FAILOVERS_KEPT]:
            if self.failovers[old].state != "running":
                del self.failovers[old]
        return progress.as_json()

    async def _follow(self, progress: FailoverProgress, caller: Caller, master: Member) -> None:
        try:
            new_master, epoch, paused_ms = await self.run_failover(
                caller, master, progress.broker_group, progress.target
            )
        except (AccessDenied, AdminRefused, InvalidRequest) as error:
            progress.state, progress.reason = "failed", refusal(error).message
        except Exception as error:  # the master's answer never came: say so
            progress.state, progress.reason = "failed", f"{type(error).__name__}: {error}"
        else:
            progress.state = "done"
            progress.new_master, progress.epoch = new_master, epoch
            progress.writes_unavailable_ms = int(paused_ms)
        progress.finished_ms = int(time.time() * 1000)

    def failover_progress(self, caller: Caller, call: ApiCall) -> dict:
        """The progress of a failover this caller asked for here (the service decided
        whether it could ask; what it asked is its own to follow)."""
        progress = self.failovers.get(int(call.params[0]))
        if progress is None or progress.asked_by != caller.identity:
            raise ApiError(404, f"no failover {call.params[0]} of yours on this node")
        return progress.as_json()

    # ---- topics --------------------------------------------------------------------------
    def topics(self, caller: Caller, call: ApiCall) -> dict:
        """One page of the topics whose name contains ``filter``, with this node's figures
        for each topic of the page only (so a page costs the same with 10 or 10,000)."""
        query = call.query
        hide_system = query.get("system", "") != "1"
        wanted = query.get("filter", "").lower()
        matching = [
            r
            for r in self.admin.list_topics(caller)
            if wanted in r.name.lower() and not (hide_system and _is_system(r.name))
        ]
        offset, limit = page_of(query)
        page = []
        for route in matching[offset : offset + limit]:
            entry = topic_json(route)
            entry.update(self._topic_figures(caller, route))
            page.append(entry)
        return {
            "total": len(matching),
            "offset": offset,
            "limit": limit,
            "retention_ms": self.retention_ms,
            "topics": page,
        }

    def _topic_figures(self, caller: Caller, route: TopicRoute) -> dict:
        store, here = self.admin.store, self.admin.broker_group
        messages = 0
        for queue_id in range(route.queue_count_in(here)):
            high = store.max_offset_in_queue(route.name, queue_id)
            messages += high - store.min_offset_in_queue(route.name, queue_id)
        return {
            "messages_here": messages,
            "in_per_s": round(self.admin.put_rate(caller, route.name), 2),
            "out_per_s": round(self.admin.stats.topic_got_rate(route.name), 2),
        }

    async def topic(self, caller: Caller, call: ApiCall) -> dict:
        """The topic and its queues' offsets, each broker group's read at its master."""
        route, _ = self.admin.describe_topic(caller, call.params[0])
        answer = topic_json(route)
        answer["broker_group_here"] = self.admin.broker_group
        answer["retention_ms"] = self.retention_ms
        answer["queue_offsets"] = []
        for broker_group, _ in route.queues:
            answer["queue_offsets"] += await self.masters.queue_bounds(
                caller, broker_group, route.name
            )
        answer["consumers"] = await self._topic_consumers(caller, route)
        return answer

    async def _topic_consumers(self, caller: Caller, route: TopicRoute) -> list[dict]:
        """The groups consuming the topic, each broker group's read at its master."""
        found = []
        for broker_group, _ in route.queues:
            found += await self.masters.topic_consumers(caller, broker_group, route.name)
        return sorted(found, key=lambda c: (c["group"], c["broker_group"]))

    async def create_topic(self, caller: Caller, call: ApiCall) -> dict:
        return topic_json(await self.admin.create_topic(caller, topic_spec(call.json())))

    async def update_topic(self, caller: Caller, call: ApiCall) -> dict:
        spec = topic_spec(call.json(), call.params[0])
        return topic_json(await self.admin.update_topic(caller, spec))

    async def delete_topic(self, caller: Caller, call: ApiCall) -> dict:
        await self.admin.delete_topic(caller, call.params[0])
        return {"deleted": call.params[0]}

    # ---- consumer groups -----------------------------------------------------------------
    async def groups(self, caller: Caller, call: ApiCall) -> dict:
        """A page of groups with their members and totals (lag, in flight, retry and
        dead-letter messages here), the topics of all groups read in one pass."""
        wanted = call.query.get("filter", "").lower()
        matching = [g for g in self.admin.list_groups(caller) if wanted in g.name.lower()]
        offset, limit = page_of(call.query)
        broker_groups = [g.name for g in self.admin.cluster(caller).broker_groups]
        page = []
        for config in matching[offset : offset + limit]:
            progress = await self._progress(caller, config.name, broker_groups)
            entry = group_json(config)
            entry["members"] = len(self.services.membership.live_members(caller, config.name))
            entry["lag"] = sum(t["lag"] for t in progress)
            entry["in_flight"] = sum(t["in_flight"] for t in progress)
            entry.update(self._retry_and_dead_letters(caller, config.name))
            page.append(entry)
        return {
            "total": len(matching),
            "offset": offset,
            "limit": limit,
            "groups": page,
        }

    async def _progress(self, caller: Caller, group: str, broker_groups: list[str]) -> list[dict]:
        """``group``'s progress per topic, every broker group's read at its master."""
        by_topic: dict[str, list[dict]] = {}
        for broker_group in broker_groups:
            for queue in await self.masters.group_progress(caller, broker_group, group):
                by_topic.setdefault(queue["topic"], []).append(queue)
        return [
            {
                "topic": topic,
                "lag": sum(q["lag"] for q in queues),
                "in_flight": sum(q["in_flight"] for q in queues),
                "queues": queues,
            }
            for topic, queues in sorted(by_topic.items())
        ]

    def _retry_and_dead_letters(self, caller: Caller, group: str) -> dict:
        """Messages held here in the group's retry and dead-letter topics."""
        counts = {}
        for field_name, prefix in (("retry_messages", "%RETRY%"), ("dlq_messages", "%DLQ%")):
            try:
                _, queues = self.admin.describe_topic(caller, prefix + group)
            except AdminRefused:
                counts[field_name] = 0  # none made yet
                continue
            counts[field_name] = sum(
                q.max_offset - q.min_offset for q in queues if q.min_offset >= 0
            )
        return counts

    async def group(self, caller: Caller, call: ApiCall) -> dict:
        name = call.params[0]
        config = next((g for g in self.admin.list_groups(caller) if g.name == name), None)
        if config is None:
            raise ApiError(404, f"CONSUMER_GROUP_NOT_FOUND: group {name} does not exist")
        membership = self.services.membership
        clients, settings, subscriptions = membership.consumers(caller, name)
        known = {c.client_id: c for c in clients}
        members = []
        for client_id, seen_ms in membership.live_members(caller, name):
            client = known.get(client_id)
            members.append(
                {
                    "client_id": client_id,
                    "last_heartbeat_ms": seen_ms,
                    "address": client.address if client else "",
                    "language": client.language if client else "",
                    "version": client.version if client else None,
                }
            )
        broker_groups = [g.name for g in self.admin.cluster(caller).broker_groups]
        progress = await self._progress(caller, name, broker_groups)
        answer = group_json(config)
        answer.update(
            members=members,
            settings=None if settings is None else vars_of(settings),
            subscriptions=[
                {"topic": s.topic, "expression": s.expression, "type": s.expression_type}
                for s in subscriptions
            ],
            topics=progress,
            lag=sum(t["lag"] for t in progress),
            in_flight=sum(t["in_flight"] for t in progress),
            broker_group_here=self.admin.broker_group,
        )
        answer.update(self._retry_and_dead_letters(caller, name))
        return answer

    async def create_group(self, caller: Caller, call: ApiCall) -> dict:
        body = call.json()
        attempts = integer(body.get("max_delivery_attempts", 0), "max_delivery_attempts", 0, 999)
        fifo = flag(body.get("fifo", False), "fifo")
        name = text(body.get("name"), "name", 255)
        config = await self.admin.create_group(caller, name, attempts, fifo)
        return group_json(config)

    async def update_group(self, caller: Caller, call: ApiCall) -> dict:
        """The group changed in place (the group page's Edit form): each of
        ``max_delivery_attempts``, ``fifo`` and ``lite_exclusive`` absent or null stays
        as it is."""
        body = call.json()
        attempts = body.get("max_delivery_attempts")
        # Its range is the admin service's rule (check_group_config), said by it.
        if attempts is not None and (not isinstance(attempts, int) or isinstance(attempts, bool)):
            raise ApiError(400, "max_delivery_attempts must be an integer or null (unchanged)")
        fifo, exclusive = (body.get(name) for name in ("fifo", "lite_exclusive"))
        fifo = None if fifo is None else flag(fifo, "fifo")
        exclusive = None if exclusive is None else flag(exclusive, "lite_exclusive")
        config = await self.admin.update_group(caller, call.params[0], attempts, fifo, exclusive)
        return group_json(config)

    async def delete_group(self, caller: Caller, call: ApiCall) -> dict:
        await self.admin.delete_group(caller, call.params[0])
        return {"deleted": call.params[0]}

    async def reset_offsets(self, caller: Caller, call: ApiCall) -> dict:
        """The group's offsets on a topic reset (``to``: ``earliest``, ``latest`` or a time
        in ms; ``dry_run``: where they would go), by the offset reset service, as for
        ``ferrymq group reset-offsets``: every queue of the topic, on every broker group."""
        body = call.json()
        topic = text(body.get("topic"), "topic", 255)
        to = body.get("to")
        if to in ("earliest", "latest"):
            target, timestamp_ms = ResetTarget(to), 0
        elif isinstance(to, int) and not isinstance(to, bool) and 0 <= to <= MAX_TIME_MS:
            target, timestamp_ms = ResetTarget.TIME, to
        else:
            raise ApiError(400, "to must be 'earliest', 'latest' or a time in ms since the epoch")
        dry_run = flag(body.get("dry_run", False), "dry_run")
        request = ResetRequest(call.params[0], topic, target, timestamp_ms, dry_run=dry_run)
        outcome = await self.services.offset_reset.reset(caller, request)
        return {
            "group": request.group,
            "topic": topic,
            "dry_run": dry_run,
            "consuming": outcome.consuming,
            "queues": [dataclasses.asdict(q) for q in outcome.queues],
        }

    # ---- messages ------------------------------------------------------------------------
    async def messages(self, caller: Caller, call: ApiCall) -> dict:
        """Messages found by key, by id, at a queue offset or stored in a time range (the
        last: up to ``TIME_RANGE_MAX`` from each queue), in every broker group that holds
        the topic (an id without a topic: in every broker group), each read at its
        master."""
        search = message_search(call.query)
        topic = search["topic"]
        route = self.admin.route(topic) if topic else None
        if route is not None:
            broker_groups = [group for group, _ in route.queues]
        elif topic:
            broker_groups = [self.admin.broker_group]  # the service says what is wrong
        else:
            broker_groups = [g.name for g in self.admin.cluster(caller).broker_groups]
        found: list[dict] = []
        for broker_group in sorted(broker_groups):
            master = self.masters.where(broker_group)
            if master is None:
                for message in await self._search_here(caller, search):
                    found.append(self._message_json(message))
            else:
                for message in await self._search_at(caller, master, search):
                    found.append(remote_message_json(message, master.node_id))
        return {"broker_groups": sorted(broker_groups), "messages": found}

    async def _search_here(self, caller: Caller, search: dict) -> list:
        queries, topic = self.services.queries, search["topic"]
        if search["kind"] == "id":
            found = queries.by_id(caller, search["id"], topic)
            return [found] if found is not None else []
        if search["kind"] == "key":
            return queries.by_key(caller, topic, search["key"], KEY_MATCHES_MAX)
        if search["kind"] == "offset":
            found = queries.at_queue_offset(caller, topic, search["queue"], search["offset"])
            return [found] if found is not None else []
        route, _ = self.admin.describe_topic(caller, topic)
        found = []
        offsets = self.services.offsets
        for queue_id in range(route.queue_count_in(self.admin.broker_group)):
            offset = await offsets.offset_by_time(caller, topic, queue_id, search["begin"])
            for _ in range(TIME_RANGE_MAX):
                message = queries.at_queue_offset(caller, topic, queue_id, offset)
                if message is None or message.store_timestamp_ms > search["end"]:
                    break
                if message.store_timestamp_ms >= search["begin"]:
                    found.append(message)
                offset += 1
        return sorted(found, key=lambda m: m.store_timestamp_ms)[:TIME_RANGE_MAX]

    async def _search_at(self, caller: Caller, master, search: dict) -> list:
        """The same search at another node's Admin door (its ``StoredMessage``s)."""
        masters, topic = self.masters, search["topic"]
        if search["kind"] == "id":
            request = api.QueryMessageByIdRequest(topic=topic, message_id=search["id"])
            return await masters.query(caller, master, "QueryMessageById", request)
        if search["kind"] == "key":
            request = api.QueryMessageByKeyRequest(
                topic=topic, key=search["key"], max_count=KEY_MATCHES_MAX
            )
            return await masters.query(caller, master, "QueryMessageByKey", request)
        if search["kind"] == "offset":
            request = api.QueryMessageByOffsetRequest(
                topic=topic, queue_id=search["queue"], offset=search["offset"]
            )
            return await masters.query(caller, master, "QueryMessageByOffset", request)
        bounds = await masters.queue_bounds(caller, master.broker_group, topic)
        found = []
        for queue in bounds:  # a bounded walk: TIME_RANGE_MAX reads at most per group
            queue_id = queue["queue_id"]
            offset = await masters.offset_by_time(caller, master, topic, queue_id, search["begin"])
            while len(found) < TIME_RANGE_MAX and offset < queue["max_offset"]:
                request = api.QueryMessageByOffsetRequest(
                    topic=topic, queue_id=queue_id, offset=offset
                )
                page = await masters.query(caller, master, "QueryMessageByOffset", request)
                if not page or page[0].store_timestamp_ms > search["end"]:
                    break
                if page[0].store_timestamp_ms >= search["begin"]:
                    found.append(page[0])
                offset += 1
        return sorted(found, key=lambda m: m.store_timestamp_ms)

    def _message_json(self, message) -> dict:
        segment = message.physical_offset - message.physical_offset % self.segment_bytes
        return {
            "topic": message.topic,
            "queue_id": message.queue_id,
            "queue_offset": message.queue_offset,
            "message_id": message.unique_key or message.offset_message_id,
            "offset_message_id": message.offset_message_id,
            "tag": message.tags or "",
            "keys": message.keys,
            "properties": message.properties,
            "body_base64": base64.b64encode(message.body).decode("ascii"),
            "body_bytes": len(message.body),
            "born_timestamp_ms": message.born_timestamp_ms,
            "store_timestamp_ms": message.store_timestamp_ms,
            "reconsume_times": message.reconsume_times,
            "stored": {
                "broker_group": self.admin.broker_group,
                "node": self.admin.node_id,
                "commitlog_offset": message.physical_offset,
                "commitlog_segment": f"{segment:020d}",
                "size": message.size,
            },
        }

    # ---- a message's delivery history ------------------------------------------------------
    async def message_history(self, caller: Caller, call: ApiCall) -> dict:
        """The delivery history per consumer group of the message at a queue offset of a
        broker group (``?broker_group=&topic=&queue=&offset=``, as a found message shows
        them), read at that broker group's master."""
        query = call.query
        topic = text(query.get("topic", ""), "topic", 255)
        broker_group = text(query.get("broker_group", ""), "broker_group", 255)
        if not topic or not broker_group:
            raise ApiError(400, "a message's history needs its topic and broker_group")
        queue_id = integer(query.get("queue", ""), "queue", 0, 1023)
        offset = integer(query.get("offset", ""), "offset", 0, 1 << 62)
        if broker_group not in {g.name for g in self.admin.cluster(caller).broker_groups}:
            raise ApiError(404, f"no broker group {broker_group}")
        return await self.masters.message_history(caller, broker_group, topic, queue_id, offset)

    # ---- users and ACL entries -----------------------------------------------------------
    def users(self, caller: Caller, call: ApiCall) -> dict:
        return {"users": [user_json(u) for u in self.admin.list_users(caller)]}

    async def create_user(self, caller: Caller, call: ApiCall) -> dict:
        body = call.json()
        user = await self.admin.create_user(
            caller,
            text(body.get("access_key"), "access_key", 255),
            text(body.get("secret_key"), "secret_key", 255),
            flag(body.get("admin", False), "admin"),
        )
        return user_json(user)

    async def update_user(self, caller: Caller, call: ApiCall) -> dict:
        body = call.json()
        admin = body.get("admin")
        if admin is not None and not isinstance(admin, bool):
            raise ApiError(400, "admin must be true, false or null (unchanged)")
        secret = text(body.get("secret_key", ""), "secret_key", 255)
        return user_json(await self.admin.update_user(caller, call.params[0], secret, admin))

    async def delete_user(self, caller: Caller, call: ApiCall) -> dict:
        await self.admin.delete_user(caller, call.params[0])
        return {"deleted": call.params[0]}

    async def grant(self, caller: Caller, call: ApiCall) -> dict:
        entry = acl_entry(call.json())
        return user_json(await self.admin.grant(caller, call.params[0], entry))

    async def revoke(self, caller: Caller, call: ApiCall) -> dict:
        entry = acl_entry(call.json())
        return user_json(await self.admin.revoke(caller, call.params[0], entry))


def message_search(query: dict[str, str]) -> dict:
    """The search a messages query asks for, checked: kind id, key, offset or time."""
    topic = text(query.get("topic", ""), "topic", 255)
    if query.get("id"):
        return {"kind": "id", "topic": topic, "id": text(query["id"], "id", 128)}
    if not topic:
        raise ApiError(400, "a search by key, offset or time needs its topic")
    if query.get("key"):
        return {"kind": "key", "topic": topic, "key": text(query["key"], "key", 255)}
    if query.get("offset", "") != "":
        return {
            "kind": "offset",
            "topic": topic,
            "queue": integer(query.get("queue", ""), "queue", 0, 1023),
            "offset": integer(query["offset"], "offset", 0, 1 << 62),
        }
    if query.get("begin", "") != "":
        begin = integer(query["begin"], "begin", 0, 1 << 62)
        end = integer(query.get("end", str(1 << 62)), "end", begin, 1 << 62)
        return {"kind": "time", "topic": topic, "begin": begin, "end": end}
    raise ApiError(400, "search by id, key, queue and offset, or begin and end times")


def remote_message_json(message: api.StoredMessage, node: str) -> dict:
    """A message another node's Admin door found (it does not say its record's size, nor
    its times consumed again)."""
    return {
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "message_id": message.message_id,
        "offset_message_id": message.offset_message_id,
        "tag": message.tag,
        "keys": list(message.keys),
        "properties": dict(message.properties),
        "body_base64": base64.b64encode(message.body).decode("ascii"),
        "body_bytes": len(message.body),
        "born_timestamp_ms": message.born_timestamp_ms,
        "store_timestamp_ms": message.store_timestamp_ms,
        "reconsume_times": None,
        "stored": {
            "broker_group": message.broker_group,
            "node": node,
            "commitlog_offset": message.physical_offset,
            "commitlog_segment": "",
            "size": None,
        },
    }


def flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise ApiError(400, f"{name} must be true or false")
    return value


def page_of(query: dict[str, str]) -> tuple[int, int]:
    offset = integer(query.get("offset", "0"), "offset", 0, 10**9)
    limit = integer(query.get("limit", str(PAGE_SIZE_DEFAULT)), "limit", 1, PAGE_SIZE_MAX)
    return offset, limit


def group_json(config: GroupConfig) -> dict:
    return {
        "name": config.name,
        "max_delivery_attempts": config.max_delivery_attempts,
        "fifo": config.fifo,
        "lite_exclusive": config.lite_exclusive,
    }


def vars_of(record) -> dict:
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


def user_json(user: User) -> dict:
    return {
        "access_key": user.access_key,
        "admin": user.admin,
        "acl": [
            {
                "effect": e.effect.value,
                "action": e.action.value,
                "kind": e.kind.value,
                "pattern": e.pattern,
            }
            for e in user.acl
        ],
    }


def acl_entry(body: dict) -> AclEntry:
    try:
        return AclEntry(
            Effect(body.get("effect")),
            Action(body.get("action")),
            ResourceKind(body.get("kind")),
            text(body.get("pattern"), "pattern", 255),
        )
    except ValueError:
        raise ApiError(
            400,
            "an ACL entry needs effect ALLOW or DENY, action PUBLISH or SUBSCRIBE, kind "
            "TOPIC or GROUP, and a pattern",
        ) from None


def _is_system(name: str) -> bool:
    """The node's own topics and the groups' retry and dead-letter topics are listed only
    when asked for (``system=1``)."""
    return name.startswith(("rmq_sys_", "%RETRY%", "%DLQ%", "%SYS%", "SCHEDULE_TOPIC"))
