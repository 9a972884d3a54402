"""A 4.x consumer hands back a message it failed to consume (CONSUMER_SEND_MSG_BACK), by the
CommitLog offset of the copy it was given, for a retry or the dead-letter topic
(``node/consumer_retry.py`` decides which and makes the record).

Who may: SUBSCRIBE on the group, and on the topic of the record at that offset, read from
the record itself: handing back a message is reading it into the group's retry topic, so
only a message the caller could have consumed as that group is copied. The record must be
a real one (``look_message_by_offset``: a record that starts there and that its consume
queue vouches for) and a consumer's (never a system topic's), so a forged offset copies
nothing. Only the master writes; the group must exist. The copy is appended through the
``ReplicatedStore`` like any send.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ha.replicated_store import ReplicatedStore
from node.admission import store_refusal
from node.consumer_retry import ConsumerRetries
from node.rpc_status import OK, InvalidRequest
from node.services.caller import Caller
from node.services.permissions import Permissions, consume, group_need
from node.topics import TopicTable
from routing.metadata import SYSTEM_PREFIX


@dataclass(frozen=True, slots=True)
class SendBackRequest:
    group: str
    physical_offset: int  # of the copy the consumer was given
    delay_level: int = 0  # 0: the next level after the times consumed; < 0: dead letters
    max_reconsume_times: int | None = None  # the client's; None: the group's


class RetryService:
    def __init__(
        self,
        store: ReplicatedStore,
        topics: TopicTable,
        retries: ConsumerRetries,
        permissions: Permissions,
        check_master: Callable[[], None],
    ) -> None:
        self.store = store
        self.topics = topics
        self.retries = retries
        self.permissions = permissions
        self.check_master = check_master

    async def send_back(self, caller: Caller, request: SendBackRequest) -> pb.Status:
        """OK, or the store's refusal; ``InvalidRequest`` (no such message: BAD_REQUEST
        ``look message by offset failed``) or ``TopicError`` before anything is written."""
        self.permissions.require(caller, [group_need(request.group)])
        self.check_master()
        group = self.topics.group(request.group)
        offset = request.physical_offset
        stored = self.store.look_message_by_offset(offset) if offset >= 0 else None
        if stored is None or stored.topic.startswith(SYSTEM_PREFIX):
            raise InvalidRequest(pb.BAD_REQUEST, f"look message by offset failed, {offset}")
        self.permissions.require(caller, consume(stored.topic, group.name))
        record = self.retries.sent_back(
            group, stored, request.delay_level, request.max_reconsume_times
        )
        result = await self.store.put_messages_async([record])
        return OK if result.ok else store_refusal(result)
