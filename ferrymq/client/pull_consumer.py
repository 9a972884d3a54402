"""Offset-based consumption: explicit queues, or a consumer group whose members share a
topic's queues and rebalance when members come and go. Reads use the Data service's Fetch
(hundreds of stored records per response, decoded here), on the remoting port
(``FERRY_FETCH``) unless the client uses gRPC (``routes.py``), not one gRPC message per message.

Queues are ``QueueRef(broker_group, queue_id)``: each broker group numbers its queues, and
every request for a queue goes to its group's master (``routes``).

Positions are the client's; ``commit`` stores them as the group's offsets (one CommitLog
record each on the node), and a queue that moves to another member is committed first, so
its new owner continues there. Heartbeats ride on ``poll``: a member heartbeats to every
master of the topic, and the group's membership is read from the first broker group's
master (so every member reads the same list whatever its access point); a member that stops
polling for longer than the node's membership expiry (30 s) is treated as gone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ferrymq.client.connection import DEFAULT_ADDRESS, Connection
from ferrymq.client.errors import FerryError, check, check_admin
from ferrymq.client.messages import ReceivedMessage, received_messages
from ferrymq.client.rebalance import allocate
from ferrymq.client.remoting_channel import RemotingChannel, fetch_answer
from ferrymq.client.routes import ROUTE_STALE_CODES, Endpoints, QueueRef
from ferrymq.client.security import ClientSecurity
from ferrymq.codec.remoting_codes import FerryRequestCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.protocol.ferrymq import data_pb2 as data

HEARTBEAT_INTERVAL_S = 5.0


@dataclass(frozen=True)
class _Prefetch:
    """A fetch sent ahead of its ``poll``: for ``queue`` from ``offset``, on ``channel``."""

    queue: QueueRef
    offset: int
    channel: RemotingChannel
    opaque: int


def _found_nothing(answer, position: int) -> bool:
    """Whether a fetch from ``position`` came back without records and without moving on:
    a waiting fetch may still get some."""
    return answer.code == pb.MESSAGE_NOT_FOUND and answer.next_offset == position


START_POLICIES = ("committed-or-beginning", "committed-or-end", "beginning", "end")


class PullConsumer:
    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        group: str = "",
        *,
        start: str = "committed-or-beginning",
        batch_size: int = 256,
        tags: str = "*",
        timeout_s: float = 10.0,
        security: ClientSecurity | None = None,
        transport: str = "remoting",
        prefetch: bool = True,
    ) -> None:
        """``transport``: "remoting" fetches on the nodes' remoting port, "grpc" on gRPC
        (``routes.py``); offsets and membership are on gRPC either way. ``prefetch``
        (remoting): while ``poll`` decodes one fetch, the next one is on its
        way; its records count as delivered on the node even if this consumer closes
        before reading them."""
        if start not in START_POLICIES:
            raise ValueError(f"start must be one of {START_POLICIES}")
        self.endpoints = Endpoints(address, timeout_s, security, transport)
        self.group = group
        self.start = start
        self.batch_size = batch_size
        self.tags = tags
        self.topic: str | None = None
        self._subscribed = False
        self._positions: dict[QueueRef, int] = {}  # queue -> next offset to read
        self._committed: dict[QueueRef, int] = {}
        self._next_heartbeat = 0.0
        self._members: list[str] = []
        self._turn = 0
        self.prefetch = prefetch
        self._prefetch: _Prefetch | None = None
        self.prefetched = 0  # fetches answered by a prefetch (observability, tests)

    @property
    def connection(self) -> Connection:
        """The access point's connection."""
        return self.endpoints.access

    # ---- what to read ----------------------------------------------------------------
    def assign(self, topic: str, queues: list[int | QueueRef]) -> None:
        """Read exactly these queues (no group rebalancing); a bare queue id means that id
        in every broker group that hosts the topic."""
        self.topic, self._subscribed = topic, False
        route = self.endpoints.route(topic)
        chosen = set()
        for queue in queues:
            if isinstance(queue, QueueRef):
                if queue not in route.queues:
                    raise ValueError(f"topic {topic} has no queue {queue}")
                chosen.add(queue)
            else:
                matching = [q for q in route.queues if q.queue_id == queue]
                if not matching:
                    raise ValueError(f"topic {topic} has no queue {queue}")
                chosen.update(matching)
        self._set_queues(sorted(chosen))

    def subscribe(self, topic: str) -> None:
        """Share ``topic``'s queues with the group's other live members."""
        if not self.group:
            raise ValueError("subscribing needs a consumer group")
        self.topic, self._subscribed = topic, True
        self._next_heartbeat = 0.0
        self._maybe_rebalance()

    @property
    def assignment(self) -> list[QueueRef]:
        return sorted(self._positions)

    def position(self, queue: QueueRef) -> int:
        return self._positions[queue]

    def seek(self, queue: QueueRef, offset: int) -> None:
        if queue not in self._positions:
            raise ValueError(f"queue {queue} is not assigned")
        self._positions[queue] = offset

    def _queue(self, queue: QueueRef) -> pb.MessageQueue:
        return pb.MessageQueue(
            topic=pb.Resource(name=self.topic),
            id=queue.queue_id,
            broker=pb.Broker(name=queue.broker_group),
        )

    def _master(self, queue: QueueRef) -> Connection:
        return self.endpoints.master(self.topic, queue.broker_group)

    def _set_queues(self, queues: list[QueueRef]) -> None:
        for queue in [q for q in self._positions if q not in queues]:
            self._commit_queue(queue)  # its next owner continues from here
            del self._positions[queue]
            self._committed.pop(queue, None)
        for queue in queues:
            if queue not in self._positions:
                self._positions[queue] = self._initial_offset(queue)

    def _initial_offset(self, queue: QueueRef) -> int:
        master = self._master(queue)
        if self.group and self.start.startswith("committed"):
            answer = master.call(
                master.messaging.GetOffset,
                rpc.GetOffsetRequest(
                    group=pb.Resource(name=self.group), message_queue=self._queue(queue)
                ),
            )
            check(answer.status, pb.OFFSET_NOT_FOUND)
            if answer.status.code == pb.OK:
                self._committed[queue] = answer.offset
                return answer.offset
        policy = pb.BEGINNING if self.start.endswith("beginning") else pb.END
        answer = master.call(
            master.messaging.QueryOffset,
            rpc.QueryOffsetRequest(message_queue=self._queue(queue), query_offset_policy=policy),
        )
        check(answer.status)
        return answer.offset

    # ---- membership ------------------------------------------------------------------
    def rebalance(self) -> None:
        """Heartbeat and recompute the assignment now (``poll`` does it every 5 s)."""
        self._next_heartbeat = 0.0
        self._maybe_rebalance()

    def _maybe_rebalance(self) -> None:
        if not self._subscribed or time.monotonic() < self._next_heartbeat:
            return
        self._next_heartbeat = time.monotonic() + HEARTBEAT_INTERVAL_S
        route = self.endpoints.route(self.topic, refresh=True)
        heartbeat = rpc.HeartbeatRequest(
            group=pb.Resource(name=self.group), client_type=pb.PULL_CONSUMER
        )
        for broker_group in route.broker_groups:
            master = self.endpoints.master(self.topic, broker_group)
            master.call(master.messaging.Heartbeat, heartbeat)
        first = self.endpoints.master(self.topic, route.broker_groups[0])
        answer = first.call(first.admin.GroupMembers, api.GroupMembersRequest(group=self.group))
        check_admin(answer.status)
        members = [m.client_id for m in answer.members]
        me = self.endpoints.client_id
        if me not in members:
            members.append(me)
        self._members = sorted(members)
        self._set_queues(allocate(list(route.queues), members, me))

    @property
    def members(self) -> list[str]:
        return list(self._members)

    # ---- reading ---------------------------------------------------------------------
    def poll(self, wait_s: float = 1.0) -> list[ReceivedMessage]:
        """The next messages of one assigned queue (queues take turns); waits up to
        ``wait_s`` on one of them when none has anything new. The queues are asked in
        turn without waiting but the last, whose fetch waits (it is answered at once when
        it has records): one request per poll for a consumer of one queue. On the
        remoting port the fetch of the queue whose turn is next is already on its way
        while this one's records are decoded, when it may have some (``_Prefetch``)."""
        self._maybe_rebalance()
        queue_ids = self.assignment
        if not queue_ids:
            return []
        last = len(queue_ids) - 1
        for step in range(len(queue_ids)):
            queue = queue_ids[(self._turn + step) % len(queue_ids)]
            following = queue_ids[(self._turn + step + 1) % len(queue_ids)]
            messages = self._pull(queue, wait_s if step == last else 0, following)
            if messages:
                self._turn += step + 1
                return messages
        self._turn += 1
        return []

    def _pull(
        self, queue: QueueRef, wait_s: float, following: QueueRef | None = None
    ) -> list[ReceivedMessage]:
        """One Data.Fetch from the queue's master: its next records, decoded here. A
        failure that may mean a stale route refreshes it (the next poll reads there)."""
        try:
            return self._fetch(queue, wait_s, following)
        except FerryError as error:
            if error.code in ROUTE_STALE_CODES:
                self.endpoints.forget(self.topic)
            raise

    def _request(self, queue: QueueRef, wait_s: float) -> data.FetchRequest:
        return data.FetchRequest(
            group=self.group,
            topic=self.topic,
            queue_id=queue.queue_id,
            offset=self._positions[queue],
            max_messages=self.batch_size,
            tags=[]
            if self.tags.strip() in ("", "*")
            else [t.strip() for t in self.tags.split("||")],
            wait_ms=int(wait_s * 1000),
        )

    def _fetch(
        self, queue: QueueRef, wait_s: float, following: QueueRef | None = None
    ) -> list[ReceivedMessage]:
        """``following``: the queue to prefetch if this one has records (its turn is next)."""
        address = self.endpoints.route(self.topic).masters[queue.broker_group]
        channel = self.endpoints.channel(address)
        timeout_s = wait_s + self.endpoints.timeout_s
        if channel is not None:
            raw = self._prefetched(queue, channel, timeout_s)
            answer = None if raw is None else fetch_answer(raw)
            if answer is None or (wait_s and _found_nothing(answer, self._positions[queue])):
                request = self._request(queue, wait_s)
                raw = channel.call(
                    FerryRequestCode.FERRY_FETCH, request.SerializeToString(), None, timeout_s
                )
                answer = fetch_answer(raw)
        else:
            master = self.endpoints.connection(address)
            answer = master.call(
                master.data.Fetch, self._request(queue, wait_s), timeout_s=timeout_s
            )
        if answer.code == pb.ILLEGAL_OFFSET:
            self._positions[queue] = answer.next_offset  # retention passed us: go on
            return []
        check(pb.Status(code=answer.code, message=answer.message), pb.MESSAGE_NOT_FOUND)
        self._positions[queue] = answer.next_offset
        # A queue read to its end would answer a fetch sent now with nothing: one request
        # for none, on the node too, at every message of a consumer that keeps up.
        # Another queue may have records.
        more = following != queue or answer.next_offset < answer.max_offset
        if answer.records and following is not None and self.prefetch and more:
            self._prefetch_from(following)
        return received_messages(answer.records, queue.broker_group)

    def _prefetch_from(self, queue: QueueRef) -> None:
        """Send the fetch ``poll`` will ask ``queue`` for next (no waiting), unanswered for
        now. A send that fails leaves nothing pending: that fetch is made again then."""
        address = self.endpoints.route(self.topic).masters.get(queue.broker_group)
        channel = self.endpoints.channel(address) if address else None
        if channel is None:
            return
        offset = self._positions[queue]
        try:
            opaque = channel.send(
                FerryRequestCode.FERRY_FETCH, self._request(queue, 0).SerializeToString()
            )
        except FerryError:
            return
        self._prefetch = _Prefetch(queue, offset, channel, opaque)

    def _prefetched(self, queue: QueueRef, channel, timeout_s: float):
        """The answer of the prefetch, when it is the fetch asked for now (same queue and
        offset, same channel; a waiting fetch makes its own when this one found nothing);
        None otherwise: a prefetch that no longer fits (a seek, a rebalance) is dropped,
        its answer skipped when it comes."""
        prefetch, self._prefetch = self._prefetch, None
        if prefetch is None:
            return None
        if (prefetch.queue, prefetch.offset, prefetch.channel) != (
            queue,
            self._positions.get(queue),
            channel,
        ):
            prefetch.channel.forget(prefetch.opaque)
            return None
        try:
            answer = channel.receive(prefetch.opaque, timeout_s)
        except FerryError:
            return None  # the connection failed: fetched again, which reports it
        self.prefetched += 1
        return answer

    # ---- offsets ---------------------------------------------------------------------
    def commit(self) -> None:
        """Store every queue's position as the group's committed offset."""
        for queue in self.assignment:
            self._commit_queue(queue)

    def _commit_queue(self, queue: QueueRef) -> None:
        if not self.group:
            raise ValueError("committing needs a consumer group")
        offset = self._positions[queue]
        if self._committed.get(queue) == offset:
            return
        master = self._master(queue)
        answer = master.call(
            master.messaging.UpdateOffset,
            rpc.UpdateOffsetRequest(
                group=pb.Resource(name=self.group), message_queue=self._queue(queue), offset=offset
            ),
        )
        check(answer.status)
        self._committed[queue] = offset

    def close(self) -> None:
        """Leave the group at once (its queues go to the others at their next poll)."""
        try:
            if self._subscribed and self.topic is not None:
                goodbye = rpc.NotifyClientTerminationRequest(group=pb.Resource(name=self.group))
                for broker_group in self.endpoints.route(self.topic).broker_groups:
                    master = self.endpoints.master(self.topic, broker_group)
                    master.call(master.messaging.NotifyClientTermination, goodbye)
        except FerryError:
            pass  # the membership expires anyway
        finally:
            self.endpoints.close()

    def __enter__(self) -> PullConsumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
