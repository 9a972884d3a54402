"""The console's JSON API: each endpoint is a call of the node's services with the session's
``Caller`` (``Door.CONSOLE``), translated to JSON. Nothing here decides who may do what:
the services do (``node/services/permissions.py``), for this door as for every other, and
their refusal is the answer (``refusal``).

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from node.rpc_status import AccessDenied, InvalidRequest
from node.services.admin import AdminRefused, ClusterSnapshot, TopicSpec
from node.services.caller import Caller
from node.services.registry import Services
from routing.metadata import MessageType, Permission, TopicRoute
from routing.replica import RaftStatus

PAGE_SIZE_MAX = 500
PAGE_SIZE_DEFAULT = 50
FAILOVERS_KEPT = 32  # finished failovers a page may still ask about
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
FailoverRunner = Callable[[Caller, str, str, str, str], Awaitable[tuple[str, int, int]]]


class ConsoleApi:
    """The endpoints; ``node_facts`` is what this node says of itself (version, ports)."""

    def __init__(
        self,
        services: Services,
        node_facts: Callable[[], dict],
        run_failover: FailoverRunner,
        retention_ms: int,
    ) -> None:
        self.services = services
        self.admin = services.admin
        self.node_facts = node_facts
        self.run_failover = run_failover
        self.retention_ms = retention_ms
        self.failovers: dict[int, FailoverProgress] = {}
        self._failover_ids = itertools.count(1)

    # ---- cluster -------------------------------------------------------------------------
    def cluster(self, caller: Caller) -> dict:
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

    def start_failover(self, caller: Caller, body: dict) -> dict:
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
        progress.task = asyncio.ensure_future(
            self._follow(progress, caller, master.node_id, master.grpc_address)
        )
        self.failovers[progress.id] = progress
        for old in sorted(self.failovers)[:-FAILOVERS_KEPT]:
            if self.failovers[old].state != "running":
                del self.failovers[old]
        return progress.as_json()

    async def _follow(
        self, progress: FailoverProgress, caller: Caller, master: str, address: str
    ) -> None:
        try:
            new_master, epoch, paused_ms = await self.run_failover(
                caller, master, address, progress.broker_group, progress.target
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

    def failover_progress(self, caller: Caller, failover_id: str) -> dict:
        """The progress of a failover this caller asked for here (the service decided
        whether it could ask; what it asked is its own to follow)."""
        progress = self.failovers.get(int(failover_id)) if failover_id.isdigit() else None
        if progress is None or progress.asked_by != caller.identity:
            raise ApiError(404, f"no failover {failover_id} on this node")
        return progress.as_json()

    # ---- topics --------------------------------------------------------------------------
    def topics(self, caller: Caller, query: dict[str, str]) -> dict:
        """One page of the topics whose name contains ``filter``, with this node's figures
        for each topic of the page only (so a page costs the same with 10 or 10,000)."""
        wanted = query.get("filter", "").lower()
        offset = integer(query.get("offset", "0"), "offset", 0, 10**9)
        limit = integer(query.get("limit", str(PAGE_SIZE_DEFAULT)), "limit", 1, PAGE_SIZE_MAX)
        hide_system = query.get("system", "") != "1"
        routes = self.admin.list_topics(caller)
        matching = [
            r
            for r in routes
            if wanted in r.name.lower() and not (hide_system and _is_system(r.name))
        ]
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

    def topic(self, caller: Caller, name: str) -> dict:
        route, queues = self.admin.describe_topic(caller, name)
        answer = topic_json(route)
        answer["broker_group_here"] = self.admin.broker_group
        answer["retention_ms"] = self.retention_ms
        answer["queue_offsets"] = [
            {
                "queue_id": q.queue_id,
                "broker_group": q.broker_group,
                "min_offset": q.min_offset,
                "max_offset": q.max_offset,
            }
            for q in queues
        ]
        return answer

    async def create_topic(self, caller: Caller, body: dict) -> dict:
        return topic_json(await self.admin.create_topic(caller, topic_spec(body)))

    async def update_topic(self, caller: Caller, name: str, body: dict) -> dict:
        return topic_json(await self.admin.update_topic(caller, topic_spec(body, name)))

    async def delete_topic(self, caller: Caller, name: str) -> dict:
        await self.admin.delete_topic(caller, name)
        return {"deleted": name}


def _is_system(name: str) -> bool:
    """The node's own topics and the groups' retry and dead-letter topics are listed only
    when asked for (``system=1``)."""
    return name.startswith(("rmq_sys_", "%RETRY%", "%DLQ%", "%SYS%", "SCHEDULE_TOPIC"))
