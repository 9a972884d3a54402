"""NOTIFY_CONSUMER_IDS_CHANGED: when a group's membership changes, the node tells each
of the group's 4.x clients connected to it, over their own connections, so they rebalance
at once instead of at their next 20 s rebalance.

RESET_CONSUMER_CLIENT_OFFSET: when a group's offsets of a topic were reset here (by any
door, ``node/services/offset_reset.py``), the node tells the same clients, as RocketMQ's
broker does (``Broker2Client.resetOffset``): a oneway request whose header names
``topic``, ``group``, ``timestamp`` and ``isForce`` (the client's header class requires
all four) and whose body is a ResetOffsetBody, ``{"offsetTable":{<MessageQueue>:offset}}``
with MessageQueue objects as keys (fastjson's form), for this broker group's queues. A
DefaultMQPushConsumer then drops its process queues of the topic, waits 10 s for their
consumption to end, takes the offsets as its own and commits them, and pulls from them
once it rebalances (``MQClientInstance.resetOffset``), instead of committing its cached
offsets over the reset.

A change is a client id joining the group (its first heartbeat for it), leaving it
(UNREGISTER_CLIENT, its connection closing) or expiring (no heartbeat for 120 s: checked
when a heartbeat arrives, at most every ``EXPIRY_CHECK_MS``; a group without heartbeats has
nobody left to tell). The notice is a oneway request with ``consumerGroup`` in its header,
as RocketMQ's broker sends it; GET_CONSUMER_LIST_BY_GROUP answers from the same member
table (``node/group_members.py``), so a client that asks after the notice sees the change.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode
from node.group_members import GroupMembers

EXPIRY_CHECK_MS = 10_000  # RocketMQ's broker scans for lapsed channels every 10 s


class ConsumerNotices:
    def __init__(
        self,
        members: GroupMembers,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.members = members
        self.clock_ms = clock_ms
        self._connections: dict[str, dict[str, object]] = {}  # group -> client id -> conn
        self._checked_ms = 0
        self.sent = 0

    def heard(self, group: str, client_id: str, connection) -> None:
        """A heartbeat of ``client_id`` in ``group`` over ``connection``; a newcomer is
        a change."""
        connections = self._connections.setdefault(group, {})
        known = connections.get(client_id) is connection
        connections[client_id] = connection
        if not known:
            self.changed(group)
        self._check_expiry()

    def left(self, group: str, client_id: str) -> None:
        connections = self._connections.get(group)
        if connections is None or connections.pop(client_id, None) is None:
            return
        if not connections:
            del self._connections[group]
        self.changed(group)

    def changed(self, group: str) -> None:
        """Tell every live member of ``group`` connected here, after the answer to the
        request that changed it (the loop's next turn)."""
        asyncio.get_running_loop().call_soon(self._tell, group)

    def _tell(self, group: str) -> None:
        live = {client_id for client_id, _ in self.members.live(group)}
        connections = self._connections.get(group, {})
        for client_id, connection in list(connections.items()):
            if client_id not in live or connection.closed:
                del connections[client_id]
                continue
            notice = RemotingCommand(
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, ext_fields={"consumerGroup": group}
            )
            if connection.send_oneway(notice):
                self.sent += 1
        if not connections:
            self._connections.pop(group, None)

    def offsets_reset(self, group: str, topic: str, table: list[tuple[str, int, int]]) -> int:
        """Tell ``group``'s live clients here that its offsets of ``topic`` are now
        ``table``'s ``(broker group, queue id, offset)``; how many were told."""
        body = reset_offset_body(topic, table)
        fields = {"topic": topic, "group": group, "timestamp": "0", "isForce": "true"}
        live = {client_id for client_id, _ in self.members.live(group)}
        told = 0
        for client_id, connection in list(self._connections.get(group, {}).items()):
            if client_id not in live or connection.closed:
                continue
            notice = RemotingCommand(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET, ext_fields=dict(fields), body=body
            )
            if connection.send_oneway(notice):
                told += 1
        self.sent += told
        return told

    def _check_expiry(self) -> None:
        now = self.clock_ms()
        if now - self._checked_ms < EXPIRY_CHECK_MS:
            return
        self._checked_ms = now
        for group in list(self._connections):
            live = {client_id for client_id, _ in self.members.live(group)}
            if set(self._connections[group]) - live:
                self.changed(group)


def reset_offset_body(topic: str, table: list[tuple[str, int, int]]) -> bytes:
    """RocketMQ's ResetOffsetBody as fastjson writes it: MessageQueue objects as keys."""
    entries = [
        json.dumps({"brokerName": broker, "queueId": queue_id, "topic": topic}, sort_keys=True)
        + f":{offset}"
        for broker, queue_id, offset in table
    ]
    return ('{"offsetTable":{' + ",".join(entries) + "}}").encode()
