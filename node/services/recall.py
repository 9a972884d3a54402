"""Recalling a delayed message before its delivery time, through every door: RocketMQ 5
RecallMessage and 4.x RECALL_MESSAGE (RocketMQ 5.3.2).

In the order of ``node/services/__init__.py``: PUBLISH on the topic; the master; the topic
exists, and takes delayed messages (a typed topic of another type is refused, as
RocketMQ's proxy refuses it); the handle verifies (``node/recall_handle.py``: this cluster
issued it for this topic) and names this node's broker group; then the timer cancels it
(``TimerService.recall``: its marker stored before the answer). A refusal is a
``RecallRefused`` whose ``reason`` each door turns into its own code.

Where ferrymq differs from RocketMQ (docs/architecture.md): a handle is checked by its
MAC, so a recall of a message that is not pending at its delivery time (delivered, or lost
with an ASYNC failover) is refused (``NOT_PENDING``) instead of answered OK; recall needs
no switch (RocketMQ's broker has ``recallMessageEnable``, off by default).

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import enum

from node.admission import Admission
from node.recall_handle import InvalidRecallHandle, RecallHandles
from node.services.caller import Caller
from node.services.permissions import Permissions, publish
from node.timer_service import NotRecallable, RecallNotStored, TimerService
from node.topics import MessageType


class RecallReason(enum.Enum):
    INVALID_HANDLE = "invalid handle"  # malformed, forged, for another topic
    OTHER_GROUP = "other broker group"  # issued by another broker group's master
    WRONG_TYPE = "wrong topic type"  # a typed topic that takes no delayed message
    NOT_PENDING = "not pending"  # its delivery time has come, or nothing waits then
    NOT_STORED = "not stored"  # the store refused the marker (``status`` says why)


class RecallRefused(Exception):
    def __init__(self, reason: RecallReason, message: str, put_result=None) -> None:
        super().__init__(message)
        self.reason = reason
        self.put_result = put_result  # the store's refusal, for NOT_STORED


class RecallService:
    def __init__(
        self,
        admission: Admission,
        permissions: Permissions,
        handles: RecallHandles,
        timers: TimerService,
        broker_group: str,
    ) -> None:
        self.admission = admission
        self.permissions = permissions
        self.handles = handles
        self.timers = timers
        self.broker_group = broker_group

    async def recall(self, caller: Caller, topic_name: str, handle: str) -> str:
        """Cancel the delayed message ``handle`` names; its message id. ``RecallRefused``,
        ``TopicError`` or ``InvalidRequest`` (not the master) when it is not."""
        self.permissions.require(caller, publish(topic_name))
        self.admission.check_master()
        topic = await self.admission.writable_topic(topic_name)
        if topic.message_type not in (MessageType.UNSPECIFIED, MessageType.DELAY):
            raise RecallRefused(
                RecallReason.WRONG_TYPE,
                f"recall failed: topic {topic_name} takes {topic.message_type.name} messages,"
                " not delayed ones",
            )
        try:
            target = self.handles.verify(handle, topic_name)
        except InvalidRecallHandle as error:
            raise RecallRefused(RecallReason.INVALID_HANDLE, f"recall failed: {error}") from None
        if target.broker_group != self.broker_group:
            raise RecallRefused(
                RecallReason.OTHER_GROUP,
                f"recall failed: the message is in broker group {target.broker_group},"
                f" this node serves {self.broker_group}",
            )
        try:
            await self.timers.recall(target.due_ms, target.message_id)
        except NotRecallable as error:
            raise RecallRefused(RecallReason.NOT_PENDING, f"recall failed: {error}") from None
        except RecallNotStored as error:
            raise RecallRefused(
                RecallReason.NOT_STORED, f"recall failed: {error}", error.result
            ) from None
        return target.message_id
