"""Message lookups of RocketMQ 4.x clients and mqadmin: QUERY_MESSAGE (by key, or by
unique key), VIEW_MESSAGE_BY_ID (by the commit log offset of a 4.x offset message id),
SEARCH_OFFSET_BY_TIMESTAMP and GET_EARLIEST_MSG_STORETIME.

The store answers them as it answers the Admin service's queries (``node/admin_service.py``):
a view returns only a real record (``look_message_by_offset``: the checks of
tests/node/test_security_query_by_id.py), and a caller naming a topic gets only a record
stored in that topic, so a transaction half or a delayed message waiting in its system
topic is not its real topic's message yet. Answers carry the stored records in RocketMQ's
layout; the client decodes them and filters again by topic and key, as RocketMQ's does.

Offset message ids carry the node's remoting address (``MessageStore.set_store_host``): a
client sends VIEW_MESSAGE_BY_ID to the address in the id.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

from ferrymq.codec.commitlog_record import encode_stored
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ha.replicated_store import ReplicatedStore
from node.admission import check_queue
from node.remoting.dispatch import Handler
from node.remoting.status_codes import refusal
from node.rpc_status import InvalidRequest
from node.topics import TopicError, TopicTable

QUERY_MAX_MESSAGES = 64  # RocketMQ's defaultQueryMaxNum
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
NOT_FOUND_BY_KEY = "can not find message, maybe time range not correct"
NO_TIME = 1 << 62


class QueryHandlers:
    def __init__(self, store: ReplicatedStore, topics: TopicTable) -> None:
        self.store = store
        self.topics = topics

    def handlers(self) -> list[tuple[int, Handler]]:
        return [
            (RequestCode.QUERY_MESSAGE, self.query_message),
            (RequestCode.VIEW_MESSAGE_BY_ID, self.view_message),
            (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, self.search_offset),
            (RequestCode.GET_EARLIEST_MSG_STORETIME, self.earliest_store_time),
        ]

    async def query_message(self, request: RemotingCommand, connection) -> RemotingCommand:
        topic = request.text("topic")
        key = request.text("key")
        wanted = min(max(request.int32("maxNum", 32), 1), QUERY_MAX_MESSAGES)
        begin_ms = request.integer("beginTimestamp", 0)
        end_ms = request.integer("endTimestamp", NO_TIME) or NO_TIME
        if request.text(UNIQUE_KEY_QUERY, "false").lower() == "true":
            one = self.store.query_by_unique_key(topic, key)
            found = [one] if one is not None else []
        else:
            found = self.store.query_by_key(topic, key, wanted, begin_ms, end_ms)
        if not found:
            return request.reply(ResponseCode.QUERY_NOT_FOUND, NOT_FOUND_BY_KEY)
        newest = max(found, key=lambda m: m.store_timestamp_ms)
        return request.reply(
            ResponseCode.SUCCESS,
            ext_fields={
                "indexLastUpdateTimestamp": str(newest.store_timestamp_ms),
                "indexLastUpdatePhyoffset": str(newest.physical_offset),
            },
            body=b"".join(encode_stored(m) for m in found),
        )

    async def view_message(self, request: RemotingCommand, connection) -> RemotingCommand:
        offset = request.integer("offset")
        topic = request.text("topic", "")  # 5.x clients name it
        found = self.store.look_message_by_offset(offset) if offset >= 0 else None
        if found is None or topic not in ("", found.topic):
            return request.reply(
                ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
            )
        return request.reply(ResponseCode.SUCCESS, body=encode_stored(found))

    async def search_offset(self, request: RemotingCommand, connection) -> RemotingCommand:
        timestamp_ms = request.integer("timestamp")
        try:
            topic, queue_id = self._queue(request)
        except (InvalidRequest, TopicError) as error:
            return request.reply(*refusal(error))
        offset = self.store.offset_by_time(topic, queue_id, timestamp_ms)
        return request.reply(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    async def earliest_store_time(self, request: RemotingCommand, connection) -> RemotingCommand:
        try:
            topic, queue_id = self._queue(request)
        except (InvalidRequest, TopicError) as error:
            return request.reply(*refusal(error))
        store = self.store
        first = store.message_at(topic, queue_id, store.min_offset_in_queue(topic, queue_id))
        timestamp = first.store_timestamp_ms if first is not None else -1
        return request.reply(ResponseCode.SUCCESS, ext_fields={"timestamp": str(timestamp)})

    def _queue(self, request: RemotingCommand) -> tuple[str, int]:
        topic = self.topics.topic(request.text("topic"))
        queue_id = request.int32("queueId")
        check_queue(topic, queue_id)
        return topic.name, queue_id
