"""Message lookups of RocketMQ 4.x clients and mqadmin: QUERY_MESSAGE (by key, or by
unique key), VIEW_MESSAGE_BY_ID (by the commit log offset of a 4.x offset message id),
SEARCH_OFFSET_BY_TIMESTAMP and GET_EARLIEST_MSG_STORETIME.

The query service answers them as it answers the Admin service's queries
(``node/services/queries.py``, one rule of who may see a record): a view returns only a
real record (``look_message_by_offset``: the checks of
tests/node/test_security_query_by_id.py), decided on the topic read from the record, and a
caller naming a topic gets only a record stored in that topic, so a transaction half or a
delayed message waiting in its system topic is not its real topic's message yet. The
offset searches are the offset service's (``node/services/offsets.py``). Answers carry
the stored records in RocketMQ's layout; the client decodes them and filters again by
topic and key, as RocketMQ's does.

Offset message ids carry the node's remoting address (``MessageStore.set_store_host``): a
client sends VIEW_MESSAGE_BY_ID to the address in the id.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

from ferrymq.codec.commitlog_record import encode_stored
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from node.remoting.authentication import DoorHandler
from node.remoting.status_codes import refusal
from node.rpc_status import InvalidRequest
from node.services.caller import Caller
from node.services.queries import NO_TIME
from node.services.registry import Services
from node.topics import TopicError

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
NOT_FOUND_BY_KEY = "can not find message, maybe time range not correct"


class QueryHandlers:
    def __init__(self, services: Services) -> None:
        self.queries = services.queries
        self.offsets = services.offsets

    def handlers(self) -> list[tuple[int, DoorHandler]]:
        return [
            (RequestCode.QUERY_MESSAGE, self.query_message),
            (RequestCode.VIEW_MESSAGE_BY_ID, self.view_message),
            (RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, self.search_offset),
            (RequestCode.GET_EARLIEST_MSG_STORETIME, self.earliest_store_time),
        ]

    async def query_message(self, request: RemotingCommand, connection, caller: Caller):
        topic = request.text("topic")
        key = request.text("key")
        wanted = request.int32("maxNum", 32)
        begin_ms = request.integer("beginTimestamp", 0)
        end_ms = request.integer("endTimestamp", NO_TIME)
        if request.text(UNIQUE_KEY_QUERY, "false").lower() == "true":
            one = self.queries.by_unique_key(caller, topic, key)
            found = [one] if one is not None else []
        else:
            found = self.queries.by_key(caller, topic, key, wanted, begin_ms, end_ms)
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

    async def view_message(self, request: RemotingCommand, connection, caller: Caller):
        offset = request.integer("offset")
        topic = request.text("topic", "")  # 5.x clients name it
        found = self.queries.at_position(caller, offset, topic)
        if found is None:
            return request.reply(
                ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
            )
        return request.reply(ResponseCode.SUCCESS, body=encode_stored(found))

    async def search_offset(self, request: RemotingCommand, connection, caller: Caller):
        topic, queue_id = request.text("topic"), request.int32("queueId")
        timestamp_ms = request.integer("timestamp")
        try:
            offset = await self.offsets.offset_by_time(caller, topic, queue_id, timestamp_ms)
        except (InvalidRequest, TopicError) as error:
            return request.reply(*refusal(error))
        return request.reply(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    async def earliest_store_time(self, request: RemotingCommand, connection, caller: Caller):
        topic, queue_id = request.text("topic"), request.int32("queueId")
        try:
            timestamp = await self.offsets.earliest_store_time_ms(caller, topic, queue_id)
        except (InvalidRequest, TopicError) as error:
            return request.reply(*refusal(error))
        return request.reply(ResponseCode.SUCCESS, ext_fields={"timestamp": str(timestamp)})
