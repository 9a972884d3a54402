"""Reads of a broker group's store, made where they are current.

Queue offsets, a group's progress (committed offsets, POP positions, messages in flight)
and stored messages live in each broker group's store, and the progress tables are kept
current by a group's master only (a slave rebuilds them from the log when it is promoted).
So the console reads them here when this node is that group's master, and otherwise asks
the group's master through its Admin door (the same RPCs as the SDK's ``Admin``), as the
console's user (``node/services/peer_admin.py``): the master's services decide on the same user,
and their refusal comes back as the console's answer. A group without a master now is
read here when it is this node's own (the best there is), and is otherwise unavailable.

A test message (``send``) is written where writes are taken, by the same rule: the send
service of a master of one of the topic's broker groups, this node's when it is one, else
the master's Messaging door as the console's user.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ferrymq.codec.properties import PROPERTY_UNIQ_KEY
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import admin_pb2 as api
from node.lite_names import is_lmq, lite_topic_of, parent_topic
from node.rpc_status import InvalidRequest
from node.services.admin import UNAVAILABLE, AdminRefused
from node.services.caller import Caller
from node.services.delivery_history import MessageHistory
from node.services.peer_admin import PeerAdmin, SentThere, no_master
from node.services.registry import Services
from node.services.send import OutgoingMessage, SendRequest
from routing.metadata import Member

READ_TIMEOUT_S = 5.0


class MasterReads:
    def __init__(
        self,
        services: Services,
        node_id: str,
        broker_group: str,
        master_of: Callable[[str], Member | None],
        peers: PeerAdmin,
    ) -> None:
        """``master_of``: a broker group's master as routing says; ``peers``: the node's
        calls to another node's Admin door as a user (``node/services/peer_admin.py``)."""
        self.services = services
        self.node_id = node_id
        self.broker_group = broker_group
        self.master_of = master_of
        self.peers = peers

    def where(self, broker_group: str) -> Member | None:
        """The master to ask for ``broker_group``'s store; None: read it here."""
        master = self.master_of(broker_group)
        if master is None:
            if broker_group == self.broker_group:
                return None
            raise AdminRefused(UNAVAILABLE, f"broker group {broker_group} has no master now")
        return None if master.node_id == self.node_id else master

    # ---- the reads -----------------------------------------------------------------------
    async def queue_bounds(self, caller: Caller, broker_group: str, topic: str) -> list[dict]:
        """``topic``'s queues on ``broker_group``: id, min and max offset."""
        master = self.where(broker_group)
        if master is None:
            _, queues = self.services.admin.describe_topic(caller, topic)
            found = [q for q in queues if q.broker_group == broker_group]
        else:
            answer = await self._call(
                caller, master, "DescribeTopic", api.DescribeTopicRequest(name=topic)
            )
            found = [q for q in answer.queues if q.broker_group == broker_group]
        return [
            {
                "queue_id": q.queue_id,
                "broker_group": broker_group,
                "min_offset": q.min_offset,
                "max_offset": q.max_offset,
            }
            for q in found
        ]

    async def group_progress(self, caller: Caller, broker_group: str, group: str) -> list[dict]:
        """``group``'s progress in every topic it has a position in on ``broker_group``
        (a LITE topic's: one row per lite topic, ``lite_topic`` naming it)."""
        master = self.where(broker_group)
        if master is None:
            queues = self.services.admin.group_progress_all(caller, group)
        else:
            request = api.GroupProgressRequest(group=group)
            queues = (await self._call(caller, master, "GroupProgress", request)).queues
        return [
            {
                "topic": parent_topic(q.topic) if is_lmq(q.topic) else q.topic,
                "lite_topic": lite_topic_of(q.topic) if is_lmq(q.topic) else "",
                "queue_id": q.queue_id,
                "broker_group": q.broker_group,
                "broker_offset": q.broker_offset,
                "consumer_offset": q.consumer_offset,
                "lag": q.lag,
                "in_flight": q.in_flight,
            }
            for q in queues
        ]

    async def topic_consumers(self, caller: Caller, broker_group: str, topic: str) -> list[dict]:
        """The groups consuming ``topic`` on ``broker_group`` (positions are its master's)."""
        master = self.where(broker_group)
        if master is None:
            found = self.services.topic_consumers.consumers(caller, topic)
        else:
            request = api.TopicConsumersRequest(topic=topic)
            found = (await self._call(caller, master, "TopicConsumers", request)).consumers
        return [
            {
                "group": c.group,
                "broker_group": c.broker_group,
                "committed": c.committed,
                "popping": c.popping,
                "subscribed": c.subscribed,
            }
            for c in found
        ]

    async def producers(self, caller: Caller, broker_group: str) -> list[dict]:
        """The producer groups with live producers at ``broker_group``'s master (4.x
        producers heartbeat to the masters they send to), each with its clients."""
        master = self.where(broker_group)
        if master is None:
            groups = self.services.membership.online_producers(caller)
        else:
            answer = await self._call(caller, master, "ListProducers", api.ListProducersRequest())
            groups = [(g.group, list(g.clients)) for g in answer.groups]
        return [
            {
                "group": group,
                "clients": [
                    {
                        "client_id": c.client_id,
                        "address": c.address,
                        "language": c.language,
                        "version": c.version,
                    }
                    for c in clients
                ],
            }
            for group, clients in groups
        ]

    async def query(self, caller: Caller, master: Member, method: str, request) -> list:
        """A message query (QueryMessageById, ByKey, ByOffset) at ``master``: the
        Admin door's ``StoredMessage``s."""
        return list((await self._call(caller, master, method, request)).messages)

    async def offset_by_time(
        self, caller: Caller, master: Member, topic: str, queue_id: int, time_ms: int
    ) -> int:
        request = api.QueryOffsetByTimeRequest(topic=topic, queue_id=queue_id, timestamp_ms=time_ms)
        return (await self._call(caller, master, "QueryOffsetByTime", request)).offset

    async def message_history(
        self, caller: Caller, broker_group: str, topic: str, queue_id: int, offset: int
    ) -> dict:
        """The delivery history of the message at ``offset`` of ``topic``'s queue
        ``queue_id`` on ``broker_group``, read at its master (``delivery_history.py``)."""
        master = self.where(broker_group)
        if master is None:
            found = await self.services.delivery_history.history(caller, topic, queue_id, offset)
            return history_json(found, self.node_id)
        request = api.MessageHistoryRequest(topic=topic, queue_id=queue_id, offset=offset)
        answer = await self._call(caller, master, "MessageHistory", request)
        return remote_history_json(answer, master.node_id)

    async def send(self, caller: Caller, topic: str, message: OutgoingMessage) -> SentThere:
        """``message`` sent to ``topic`` by the send service of a master of one of the
        topic's broker groups (this node's own group first: it is here when this node is
        its master); its refusals raised as that service's. A topic routing does not know
        goes to this node's own group, whose master's service says so."""
        route = self.services.admin.route(topic)
        groups = [group for group, _ in route.queues] if route else [self.broker_group]
        groups.sort(key=lambda group: group != self.broker_group)
        for broker_group in groups:
            master = self.master_of(broker_group)
            if master is None:
                continue
            if master.node_id == self.node_id:
                outcome = await self.services.send.send(caller, SendRequest(topic, [message]))
                if outcome.status.code != pb.OK:
                    raise InvalidRequest(outcome.status.code, outcome.status.message)
                return SentThere(
                    self.broker_group,
                    self.node_id,
                    message.properties[PROPERTY_UNIQ_KEY],
                    outcome.queues[0],
                    outcome.appended[0].queue_offset,
                )
            return await self.peers.send(caller, master, topic, message, READ_TIMEOUT_S)
        raise no_master(groups[0])

    async def _call(self, caller: Caller, master: Member, method: str, request):
        return await self.peers.call(caller, master, method, request, READ_TIMEOUT_S)


def history_json(history: MessageHistory, node: str) -> dict:
    """A history read here, as the console's JSON (``node``: who answered)."""
    answer = dataclasses.asdict(history)
    answer.update(
        queue_offset=history.queue_offset,
        note=history.note,
        node=node,
        groups=[
            dataclasses.asdict(g)
            | {
                "state": g.state.value,
                "events": [dataclasses.asdict(e) | {"kind": e.kind.value} for e in g.events],
            }
            for g in history.groups
        ],
    )
    return answer


def remote_history_json(answer: api.MessageHistoryResponse, node: str) -> dict:
    """A history another node's Admin door answered, as ``history_json`` says it."""
    return {
        "topic": answer.topic,
        "queue_id": answer.queue_id,
        "queue_offset": answer.offset,
        "store_timestamp_ms": answer.store_timestamp_ms,
        "broker_group": answer.broker_group,
        "records_scanned": answer.records_scanned,
        "records_max": answer.records_max,
        "truncated": answer.truncated,
        "note": f"history truncated after {answer.records_max} records" if answer.truncated else "",
        "node": node,
        "groups": [
            {
                "group": g.group,
                "model": g.model,
                "state": g.state,
                "state_text": g.state_text,
                "committed_offset": g.committed_offset,
                "pop_next_offset": g.pop_next_offset,
                "events": [
                    {
                        "time_ms": e.time_ms,
                        "kind": e.kind,
                        "attempt": e.attempt,
                        "delivery": e.delivery,
                        "visible_at_ms": e.visible_at_ms,
                        "detail": e.detail,
                    }
                    for e in g.events
                ],
            }
            for g in answer.groups
        ],
    }
