"""LOCK_BATCH_MQ and UNLOCK_BATCH_MQ: the queue locks of 4.x orderly consumers, on the lock
service (``node/services/locks.py``: SUBSCRIBE on the group and the queues' topics, then
the master of the queues' broker group, as RocketMQ's clients send them to brokerId 0).

Bodies are RocketMQ's JSON: ``{"consumerGroup", "clientId", "mqSet": [{"topic",
"brokerName", "queueId"}]}`` in; ``{"lockOKMQSet": [...]}`` out for a lock. A body that is
not that shape is answered SYSTEM_ERROR with what is wrong, and locks nothing.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

import json

from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from node.queue_locks import LockedQueue
from node.remoting.authentication import DoorHandler
from node.remoting.status_codes import refusal
from node.rpc_status import InvalidRequest
from node.services.caller import Caller
from node.services.registry import Services

QUEUES_PER_REQUEST_MAX = 4096


class BadLockBody(ValueError):
    """A lock or unlock body that is not RocketMQ's."""


def parse_lock_body(body: bytes) -> tuple[str, str, list[LockedQueue]]:
    """(group, client id, queues) of a LockBatchRequestBody / UnlockBatchRequestBody."""
    try:
        data = json.loads(body)
    except ValueError as error:
        raise BadLockBody(f"lock body is not JSON: {error}") from None
    if type(data) is not dict:
        raise BadLockBody("lock body is not a JSON object")
    group, client_id = data.get("consumerGroup"), data.get("clientId")
    if type(group) is not str or not group:
        raise BadLockBody("consumerGroup is not a non-empty string")
    if type(client_id) is not str or not client_id:
        raise BadLockBody("clientId is not a non-empty string")
    entries = data.get("mqSet") or []
    if type(entries) is not list:
        raise BadLockBody("mqSet is not a list")
    if len(entries) > QUEUES_PER_REQUEST_MAX:
        raise BadLockBody(f"mqSet has {len(entries)} queues, the limit is {QUEUES_PER_REQUEST_MAX}")
    queues = []
    for entry in entries:
        if type(entry) is not dict:
            raise BadLockBody("an mqSet entry is not an object")
        topic, broker, queue_id = entry.get("topic"), entry.get("brokerName"), entry.get("queueId")
        if type(topic) is not str or type(broker) is not str or type(queue_id) is not int:
            raise BadLockBody("an mqSet entry needs topic, brokerName (strings), queueId (integer)")
        queues.append(LockedQueue(topic, broker, queue_id))
    return group, client_id, queues


def queue_json(queue: LockedQueue) -> dict:
    return {"brokerName": queue.broker_name, "queueId": queue.queue_id, "topic": queue.topic}


class LockHandlers:
    def __init__(self, services: Services) -> None:
        self.locks = services.locks

    def handlers(self) -> list[tuple[int, DoorHandler]]:
        return [
            (RequestCode.LOCK_BATCH_MQ, self.lock),
            (RequestCode.UNLOCK_BATCH_MQ, self.unlock),
        ]

    async def lock(self, request: RemotingCommand, connection, caller: Caller):
        try:
            group, client_id, queues = parse_lock_body(request.body)
            held = self.locks.lock(caller, group, client_id, queues)
        except InvalidRequest as error:
            return request.reply(*refusal(error))
        except BadLockBody as error:
            return request.reply(ResponseCode.SYSTEM_ERROR, str(error))
        body = json.dumps({"lockOKMQSet": [queue_json(q) for q in held]}, separators=(",", ":"))
        return request.reply(ResponseCode.SUCCESS, body=body.encode())

    async def unlock(self, request: RemotingCommand, connection, caller: Caller):
        try:
            group, client_id, queues = parse_lock_body(request.body)
            self.locks.unlock(caller, group, client_id, queues)
        except InvalidRequest as error:
            return request.reply(*refusal(error))
        except BadLockBody as error:
            return request.reply(ResponseCode.SYSTEM_ERROR, str(error))
        return request.reply(ResponseCode.SUCCESS)
