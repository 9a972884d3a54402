"""CONSUMER_SEND_MSG_BACK: a 4.x consumer hands back a message it failed to consume, by
the CommitLog offset of the copy it was given, for a retry or the dead-letter topic
(``node/consumer_retry.py`` decides which and makes the record).

The message must be a real record (``look_message_by_offset``: a record that starts
there and that its consume queue vouches for), so a forged offset cannot copy bytes from
inside another message's body into the group's topics. Only the master writes; the group
must exist. The record is appended through the ``ReplicatedStore`` like any send, so SYNC
replication acknowledges a send-back as it does a send.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ha.replicated_store import ReplicatedStore
from node.admission import Admission, store_refusal
from node.consumer_retry import ConsumerRetries
from node.remoting.dispatch import Handler
from node.remoting.status_codes import refusal, response_code
from node.rpc_status import InvalidRequest
from node.topics import TopicError


class RetryHandlers:
    def __init__(
        self, store: ReplicatedStore, admission: Admission, retries: ConsumerRetries
    ) -> None:
        self.store = store
        self.admission = admission
        self.retries = retries

    def handlers(self) -> list[tuple[int, Handler]]:
        return [(RequestCode.CONSUMER_SEND_MSG_BACK, self.send_back)]

    async def send_back(self, request: RemotingCommand, connection) -> RemotingCommand:
        offset = request.integer("offset")
        group_name = request.text("group")
        delay_level = request.int32("delayLevel", 0)
        max_reconsume_times = request.int32("maxReconsumeTimes", -1)
        try:
            self.admission.check_master()
            group = self.admission.topics.group(group_name)
        except (InvalidRequest, TopicError) as error:
            code, remark = refusal(error)
            return request.reply(code, remark)
        stored = self.store.look_message_by_offset(offset) if offset >= 0 else None
        if stored is None:
            return request.reply(
                ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}"
            )
        record = self.retries.sent_back(
            group, stored, delay_level, max_reconsume_times if max_reconsume_times >= 0 else None
        )
        result = await self.store.put_messages_async([record])
        if result.ok:
            return request.reply(ResponseCode.SUCCESS)
        status = store_refusal(result)
        return request.reply(response_code(status.code), status.message)
