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
from ferrymq.client.remoting_channel import (
    FetchAnswer,
    RemotingChannel,
    fetch_answer,
    wait_readable,
)
from ferrymq.client.remoting_channel import deadline as deadline_exceeded
from ferrymq.client.routes import ROUTE_STALE_CODES, Endpoints, QueueRef
from ferrymq.client.security import ClientSecurity
from ferrymq.codec.remoting_codes import FerryRequestCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.protocol.ferrymq import data_pb2 as data

HEARTBEAT_INTERVAL_S = 5.0
# ``follow``'s most: the node's (``FetchRequest.follow``); and what a reader asks for
# unless told otherwise (bench/RESULTS.md, "The followed fetch by default").
FETCH_FOLLOW_MAX = 64
FETCH_FOLLOW_DEFAULT = FETCH_FOLLOW_MAX
# A fetch's answers that are not errors: records, or none yet (its wait ended).
ANSWERED_CODES = frozenset((pb.OK, pb.MESSAGE_NOT_FOUND))


@dataclass(slots=True)
class _Sent:
    """A fetch on its way, or waiting on the node: for ``queue`` from ``offset``, on
    ``channel``; sent by the consumer's ``poll``-th poll, failed if unanswered at ``due``.
    Not ``frozen``: made once a message by a tailing reader, and a frozen dataclass's
    ``__init__`` sets each field through ``object.__setattr__`` (~4 µs)."""

    queue: QueueRef
    offset: int
    channel: RemotingChannel
    opaque: int
    poll: int
    answers_by: float  # when the node answers it at the latest (its wait ends)
    timeout_s: float
    due: float


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
        follow: int = FETCH_FOLLOW_DEFAULT,
    ) -> None:
        """``transport``: "remoting" fetches on the nodes' remoting port, "grpc" on gRPC
        (``routes.py``); offsets and membership are on gRPC either way. ``prefetch``
        (remoting): every assigned queue has a fetch on its way or waiting on the node
        (``poll``), so fetches travel while records are decoded and a message written to
        any queue is answered at once; records answered but not yet handed out count as
        delivered on the node even if this consumer closes before reading them. Without
        it, each fetch is answered before the next is sent. ``follow`` (remoting, with
        ``prefetch``; 0..64, 64 unless told): a fetch sent by a poll that waits asks the
        node for this many more answers with records on the same request, so a reader at
        its queue's end asks once for up to ``follow`` + 1 answers
        (``FetchRequest.follow``), and a reader of a backlog once for as many batches.
        It saves the node a request a message and the reader ~12 µs of CPU a message
        here (bench/RESULTS.md, "The followed fetch by default"). With 0, each answer is
        asked for; a node older than the field answers once either way."""
        if start not in START_POLICIES:
            raise ValueError(f"start must be one of {START_POLICIES}")
        if not 0 <= follow <= FETCH_FOLLOW_MAX:
            raise ValueError(f"follow must be 0..{FETCH_FOLLOW_MAX}")
        self.follow = follow
        self.endpoints = Endpoints(address, timeout_s, security, transport)
        self.group = group
        self.start = start
        self.batch_size = batch_size
        self.tags = tags  # the filter's list, parsed once (``_request``)
        self.topic: str | None = None
        self._subscribed = False
        self._positions: dict[QueueRef, int] = {}  # queue -> next offset to read
        self._assigned: list[QueueRef] = []  # sorted(self._positions), kept by _set_queues
        self._committed: dict[QueueRef, int] = {}
        self._next_heartbeat = 0.0
        self._members: list[str] = []
        self._turn = 0
        self.prefetch = prefetch
        self._sent: dict[QueueRef, _Sent] = {}  # at most one fetch per queue
        self._polls = 0
        self.prefetched = 0  # answers to fetches an earlier poll sent (observability, tests)

    @property
    def tags(self) -> str:
        """The tag filter: "*" (every message) or tags joined by "||"."""
        return self._tags

    @tags.setter
    def tags(self, tags: str) -> None:
        self._tags = tags
        stripped = tags.strip()
        self._tag_list = [] if stripped in ("", "*") else [t.strip() for t in tags.split("||")]

    @property
    def connection(self) -> Connection:
        """The access point's connection."""
        return self.endpoints.access

    # ---- what to read ----------------------------------------------------------------
    def assign(self, topic: str, queues: list[int | QueueRef]) -> None:
        """Read exactly these queues (no group rebalancing); a bare queue id means that id
        in every broker group that hosts the topic."""
        self._read_topic(topic)
        self._subscribed = False
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
        self._read_topic(topic)
        self._subscribed = True
        self._next_heartbeat = 0.0
        self._maybe_rebalance()

    @property
    def assignment(self) -> list[QueueRef]:
        return list(self._assigned)

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

    def _read_topic(self, topic: str) -> None:
        """Read ``topic`` from now on. Another topic's queues are other queues, though
        their ``QueueRef``s are alike: what was read of the last one is committed and its
        positions forgotten (they were kept, and read the new topic from the old offsets)."""
        if self.topic is not None and topic != self.topic:
            self._set_queues([])
        self.topic = topic

    def _set_queues(self, queues: list[QueueRef]) -> None:
        for queue in [q for q in self._positions if q not in queues]:
            self._commit_queue(queue)  # its next owner continues from here
            del self._positions[queue]
            self._committed.pop(queue, None)
        for queue in queues:
            if queue not in self._positions:
                self._positions[queue] = self._initial_offset(queue)
        self._assigned = sorted(self._positions)

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
        ``wait_s`` for any of them when none has anything new.

        On the remoting port with ``prefetch`` (the default) a poll has a fetch on its
        way or waiting on the node for every assigned queue (``_Sent``), so a message
        written to any of them is answered at once, however many queues the consumer
        reads. A queue whose answer had records has its next fetch sent before these are
        decoded, or the node reads on by itself (``_take``, ``_follow``); answers that
        come while another queue's are handed out wait for their turn. Otherwise (gRPC,
        or no prefetch) the queues are asked one at a time in turn without waiting, and
        the last one waits."""
        self._maybe_rebalance()
        queues = self._assigned
        if not queues:
            return []
        try:
            if self.prefetch:
                channels = {queue: self._channel_of(queue) for queue in queues}
                if all(channels.values()):
                    return self._poll_watching(queues, channels, wait_s)
            return self._poll_in_turn(queues, wait_s)
        except FerryError as error:
            if error.code in ROUTE_STALE_CODES:  # the next poll reads where a fresh route says
                self.endpoints.forget(self.topic)
            raise

    def _in_turn(self, queues: list[QueueRef]) -> list[tuple[int, QueueRef]]:
        """The queues with their places, starting at the one whose turn it is."""
        return [
            (self._turn + step, queues[(self._turn + step) % len(queues)])
            for step in range(len(queues))
        ]

    def _poll_in_turn(self, queues: list[QueueRef], wait_s: float) -> list[ReceivedMessage]:
        """One fetch at a time: the queues asked in turn without waiting, the last one
        waits (one request per poll for a consumer of one queue)."""
        for place, queue in self._in_turn(queues):
            last = place == self._turn + len(queues) - 1
            messages = self._pull(queue, wait_s if last else 0)
            if messages:
                self._turn = place + 1
                return messages
        self._turn += 1
        return []

    def _poll_watching(
        self, queues: list[QueueRef], channels: dict[QueueRef, RemotingChannel], wait_s: float
    ) -> list[ReceivedMessage]:
        """A fetch sent to every queue that has none (``channels``: each queue's master's);
        the first answer with records, in the queues' turn, or [] once ``wait_s`` passes.
        A queue this poll found empty is not asked again before the next poll."""
        self._polls += 1
        deadline = time.monotonic() + wait_s
        self._drop_unfit(channels)
        found_empty: set[QueueRef] = set()
        while True:
            for queue in queues:
                if queue not in self._sent and queue not in found_empty:
                    remaining_s = max(0.0, deadline - time.monotonic())
                    self._send_fetch(queue, channels[queue], remaining_s)
            for place, queue in self._in_turn(queues):
                sent = self._sent.get(queue)
                if sent is None or not sent.channel.answered(sent.opaque):
                    continue
                messages = self._take(sent, wait_s)
                if messages:
                    self._turn = place + 1
                    return messages
                if sent.poll == self._polls and self._positions.get(queue) == sent.offset:
                    found_empty.add(queue)
                # else it waited out in an earlier poll, or skipped what the tags filter
                # out: asked again
            if not self._await_answer(deadline):
                self._turn += 1
                return []

    def _send_fetch(self, queue: QueueRef, channel: RemotingChannel, wait_s: float) -> None:
        """Send ``queue``'s next fetch on ``channel``, waiting up to ``wait_s`` on the
        node; its answer is taken by this poll or a later one."""
        timeout_s = wait_s + self.endpoints.timeout_s
        request = self._request(queue, wait_s)
        if wait_s > 0:
            request.follow = self.follow
        opaque = channel.send(
            FerryRequestCode.FERRY_FETCH, request.SerializeToString(), None, timeout_s
        )
        now = time.monotonic()
        self._sent[queue] = _Sent(
            queue,
            self._positions[queue],
            channel,
            opaque,
            self._polls,
            now + wait_s,
            timeout_s,
            now + timeout_s,
        )

    def _take(self, sent: _Sent, wait_s: float) -> list[ReceivedMessage]:
        """The records of ``sent``'s answer (here already). The queue's next fetch leaves
        before these are decoded: when the answer shows more records waiting, and at the
        queue's end when the poll waits (``wait_s`` > 0), where it parks on the node until
        the next record is written. Sent by the next poll instead, after the poll's caller
        had the messages, a tailing reader's fetch reached the node just before a send
        that caller then made, and the node was still parking the fetch when the send
        came: the send waited (bench/RESULTS.md, "A tailing reader's next fetch sent with
        its answer"). A fetch whose answer says the node reads on (``follows``) is not
        sent again: the next answer comes to the same request (``_follow``)."""
        del self._sent[sent.queue]
        if sent.poll != self._polls:
            self.prefetched += 1
        answer = self._answered(sent.queue, fetch_answer(sent.channel.receive(sent.opaque)))
        if answer is None or not answer.records:
            return []
        if answer.follows:
            self._follow(sent)
        elif wait_s > 0 or answer.next_offset < answer.max_offset:
            self._send_fetch(sent.queue, sent.channel, wait_s)
        return received_messages(answer.records, sent.queue.broker_group)

    def _follow(self, sent: _Sent) -> None:
        """``sent`` was answered and the node reads on (``FetchRequest.follow``): it waits
        for that answer as for a fetch sent now from the queue's new position, with the
        wait it was sent with."""
        sent.channel.await_more(sent.opaque)
        now = time.monotonic()
        sent.offset = self._positions[sent.queue]
        sent.poll = self._polls
        sent.answers_by = now + sent.timeout_s - self.endpoints.timeout_s
        sent.due = now + sent.timeout_s
        self._sent[sent.queue] = sent

    def _drop_unfit(self, channels: dict[QueueRef, RemotingChannel]) -> None:
        """Forget the sent fetches that no longer fit: of a queue no longer assigned, from
        another offset than its position (a seek), on a connection that failed or to a
        node that is no longer the queue's master (``channels``: each assigned queue's
        master's). Their answers are skipped when they come."""
        for queue, sent in list(self._sent.items()):
            fits = (
                sent.channel is channels.get(queue)
                and sent.offset == self._positions[queue]
                and sent.channel.awaits(sent.opaque)
            )
            if not fits:
                sent.channel.forget(sent.opaque)
                del self._sent[queue]

    def _channel_of(self, queue: QueueRef) -> RemotingChannel | None:
        address = self.endpoints.route(self.topic).masters.get(queue.broker_group)
        return self.endpoints.channel(address) if address else None

    def _await_answer(self, deadline: float) -> bool:
        """Wait until an answer to a sent fetch has arrived (True), or ``deadline`` has
        passed and no fetch is owed an answer by then (False). Owed: those this poll
        sent (one sent with the poll's remaining wait is answered just after the
        deadline) and those whose wait on the node ends before it (a fetch sent ahead
        without waiting is answered at once: a poll that does not wait still waits for
        it). A fetch unanswered past its own timeout fails its connection, as a fetch
        waited for alone does (DEADLINE_EXCEEDED)."""
        while True:  # plain loops: a tailing reader comes here once a message
            now = time.monotonic()
            sent = list(self._sent.values())
            if not sent:
                return False
            channels = list({s.channel: None for s in sent})
            for channel in channels:
                channel.read_buffered()
            if _any_answered(sent):
                return True
            owed = False
            until = sent[0].due
            for s in sent:
                if s.due <= now:
                    s.channel.close()
                    raise deadline_exceeded(s.channel.address, s.timeout_s)
                owed = owed or s.poll == self._polls or s.answers_by <= deadline
                until = min(until, s.due)
            last_look = now >= deadline and not owed  # at what has come already
            if now < deadline:
                until = min(until, deadline)
            for channel in wait_readable(channels, 0.0 if last_look else until - now):
                channel.read_frame()
            if _any_answered(sent):
                return True
            if last_look:
                return False

    def _pull(self, queue: QueueRef, wait_s: float) -> list[ReceivedMessage]:
        """One fetch from the queue's master, waited for: its next records, decoded here."""
        answer = self._answered(queue, self._fetch(queue, wait_s))
        if answer is None:
            return []
        return received_messages(answer.records, queue.broker_group)

    def _answered(self, queue: QueueRef, answer: FetchAnswer) -> FetchAnswer | None:
        """``answer``, the queue's position moved past it; None when retention passed the
        position (it moves on)."""
        if answer.code == pb.ILLEGAL_OFFSET:
            self._positions[queue] = answer.next_offset  # retention passed us: go on
            return None
        if answer.code not in ANSWERED_CODES:
            check(pb.Status(code=answer.code, message=answer.message))
        self._positions[queue] = answer.next_offset
        return answer

    def _request(self, queue: QueueRef, wait_s: float) -> data.FetchRequest:
        return data.FetchRequest(
            group=self.group,
            topic=self.topic,
            queue_id=queue.queue_id,
            offset=self._positions[queue],
            max_messages=self.batch_size,
            tags=self._tag_list,
            wait_ms=int(wait_s * 1000),
        )

    def _fetch(self, queue: QueueRef, wait_s: float):
        """One fetch and its answer, on the remoting port or gRPC."""
        address = self.endpoints.route(self.topic).masters[queue.broker_group]
        channel = self.endpoints.channel(address)
        timeout_s = wait_s + self.endpoints.timeout_s
        request = self._request(queue, wait_s)
        if channel is not None:
            raw = channel.call(
                FerryRequestCode.FERRY_FETCH, request.SerializeToString(), None, timeout_s
            )
            return fetch_answer(raw)
        master = self.endpoints.connection(address)
        return master.call(master.data.Fetch, request, timeout_s=timeout_s)

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
        self._sent.clear()  # their answers go with the connections
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


def _any_answered(sent: list[_Sent]) -> bool:
    for s in sent:  # noqa: SIM110 (a generator's steps are Python calls, any's are not)
        if s.channel.answered(s.opaque):
            return True
    return False
