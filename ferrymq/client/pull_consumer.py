"""Offset-based consumption: explicit queues, or a consumer group whose members share a
topic's queues and rebalance when members come and go. Reads use the Data service's Fetch
(hundreds of stored records per response, decoded here), not one gRPC message per message.

Positions are the client's; ``commit`` stores them as the group's offsets (one CommitLog
record each on the node), and a queue that moves to another member is committed first, so
its new owner continues there. Heartbeats ride on ``poll``: a member that stops polling for
longer than the node's membership expiry (30 s) is treated as gone.
"""

from __future__ import annotations

import time

from ferrymq.client.connection import DEFAULT_ADDRESS, Connection
from ferrymq.client.errors import FerryError, check, check_admin
from ferrymq.client.messages import ReceivedMessage, decode_records
from ferrymq.client.rebalance import allocate
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.protocol.ferrymq import data_pb2 as data

HEARTBEAT_INTERVAL_S = 5.0
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
    ) -> None:
        if start not in START_POLICIES:
            raise ValueError(f"start must be one of {START_POLICIES}")
        self.connection = Connection(address, timeout_s)
        self.group = group
        self.start = start
        self.batch_size = batch_size
        self.tags = tags
        self.topic: str | None = None
        self._subscribed = False
        self._positions: dict[int, int] = {}  # queue id -> next offset to read
        self._committed: dict[int, int] = {}
        self._next_heartbeat = 0.0
        self._members: list[str] = []
        self._turn = 0

    # ---- what to read ----------------------------------------------------------------
    def assign(self, topic: str, queue_ids: list[int]) -> None:
        """Read exactly these queues (no group rebalancing)."""
        self.topic, self._subscribed = topic, False
        self._set_queues(queue_ids)

    def subscribe(self, topic: str) -> None:
        """Share ``topic``'s queues with the group's other live members."""
        if not self.group:
            raise ValueError("subscribing needs a consumer group")
        self.topic, self._subscribed = topic, True
        self._next_heartbeat = 0.0
        self._maybe_rebalance()

    @property
    def assignment(self) -> list[int]:
        return sorted(self._positions)

    def position(self, queue_id: int) -> int:
        return self._positions[queue_id]

    def seek(self, queue_id: int, offset: int) -> None:
        if queue_id not in self._positions:
            raise ValueError(f"queue {queue_id} is not assigned")
        self._positions[queue_id] = offset

    def _queue(self, queue_id: int) -> pb.MessageQueue:
        return pb.MessageQueue(topic=pb.Resource(name=self.topic), id=queue_id)

    def _set_queues(self, queue_ids: list[int]) -> None:
        for queue_id in [q for q in self._positions if q not in queue_ids]:
            self._commit_queue(queue_id)  # its next owner continues from here
            del self._positions[queue_id]
            self._committed.pop(queue_id, None)
        for queue_id in queue_ids:
            if queue_id not in self._positions:
                self._positions[queue_id] = self._initial_offset(queue_id)

    def _initial_offset(self, queue_id: int) -> int:
        call, messaging = self.connection.call, self.connection.messaging
        if self.group and self.start.startswith("committed"):
            answer = call(
                messaging.GetOffset,
                rpc.GetOffsetRequest(
                    group=pb.Resource(name=self.group), message_queue=self._queue(queue_id)
                ),
            )
            check(answer.status, pb.OFFSET_NOT_FOUND)
            if answer.status.code == pb.OK:
                self._committed[queue_id] = answer.offset
                return answer.offset
        policy = pb.BEGINNING if self.start.endswith("beginning") else pb.END
        answer = call(
            messaging.QueryOffset,
            rpc.QueryOffsetRequest(message_queue=self._queue(queue_id), query_offset_policy=policy),
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
        self.connection.call(
            self.connection.messaging.Heartbeat,
            rpc.HeartbeatRequest(group=pb.Resource(name=self.group), client_type=pb.PULL_CONSUMER),
        )
        answer = self.connection.call(
            self.connection.admin.GroupMembers, api.GroupMembersRequest(group=self.group)
        )
        check_admin(answer.status)
        members = [m.client_id for m in answer.members]
        if self.connection.client_id not in members:
            members.append(self.connection.client_id)
        route = self.connection.call(
            self.connection.messaging.QueryRoute,
            rpc.QueryRouteRequest(topic=pb.Resource(name=self.topic)),
        )
        check(route.status)
        queue_ids = [q.id for q in route.message_queues]
        self._members = sorted(members)
        self._set_queues(allocate(queue_ids, members, self.connection.client_id))

    @property
    def members(self) -> list[str]:
        return list(self._members)

    # ---- reading ---------------------------------------------------------------------
    def poll(self, wait_s: float = 1.0) -> list[ReceivedMessage]:
        """The next messages of one assigned queue (queues take turns); waits up to
        ``wait_s`` on one of them when none has anything new."""
        self._maybe_rebalance()
        queue_ids = self.assignment
        if not queue_ids:
            return []
        for step in range(len(queue_ids)):
            queue_id = queue_ids[(self._turn + step) % len(queue_ids)]
            messages = self._pull(queue_id, 0)
            if messages:
                self._turn += step + 1
                return messages
        queue_id = queue_ids[self._turn % len(queue_ids)]
        self._turn += 1
        return self._pull(queue_id, wait_s)

    def _pull(self, queue_id: int, wait_s: float) -> list[ReceivedMessage]:
        """One Data.Fetch: the queue's next records, decoded here."""
        request = data.FetchRequest(
            group=self.group,
            topic=self.topic,
            queue_id=queue_id,
            offset=self._positions[queue_id],
            max_messages=self.batch_size,
            tags=[]
            if self.tags.strip() in ("", "*")
            else [t.strip() for t in self.tags.split("||")],
            wait_ms=int(wait_s * 1000),
        )
        answer = self.connection.call(
            self.connection.data.Fetch, request, timeout_s=wait_s + self.connection.timeout_s
        )
        if answer.code == pb.ILLEGAL_OFFSET:
            self._positions[queue_id] = answer.next_offset  # retention passed us: go on
            return []
        check(pb.Status(code=answer.code, message=answer.message), pb.MESSAGE_NOT_FOUND)
        self._positions[queue_id] = answer.next_offset
        return [ReceivedMessage.from_record(r) for r in decode_records(answer.records)]

    # ---- offsets ---------------------------------------------------------------------
    def commit(self) -> None:
        """Store every queue's position as the group's committed offset."""
        for queue_id in self.assignment:
            self._commit_queue(queue_id)

    def _commit_queue(self, queue_id: int) -> None:
        if not self.group:
            raise ValueError("committing needs a consumer group")
        offset = self._positions[queue_id]
        if self._committed.get(queue_id) == offset:
            return
        answer = self.connection.call(
            self.connection.messaging.UpdateOffset,
            rpc.UpdateOffsetRequest(
                group=pb.Resource(name=self.group),
                message_queue=self._queue(queue_id),
                offset=offset,
            ),
        )
        check(answer.status)
        self._committed[queue_id] = offset

    def close(self) -> None:
        """Leave the group at once (its queues go to the others at their next poll)."""
        try:
            if self._subscribed:
                self.connection.call(
                    self.connection.messaging.NotifyClientTermination,
                    rpc.NotifyClientTerminationRequest(group=pb.Resource(name=self.group)),
                )
        except FerryError:
            pass  # the membership expires anyway
        finally:
            self.connection.close()

    def __enter__(self) -> PullConsumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
