"""The one table from the node's outcomes to RocketMQ's response codes.

Admission (``node/admission.py``), routing's name rules and the store's refusals all speak
``apache.rocketmq.v2.Code`` (the gRPC doors answer with it as it is); the remoting doors
answer with the RocketMQ 4.x code of the same meaning, looked up here. The choices follow
what a 4.x client does with each code: sends are retried on another broker for
SERVICE_NOT_AVAILABLE, SYSTEM_ERROR, NO_PERMISSION and TOPIC_NOT_EXIST, never for
MESSAGE_ILLEGAL, and FLUSH_DISK_TIMEOUT / FLUSH_SLAVE_TIMEOUT are results (the message is
written, not confirmed), not errors.
"""

from __future__ import annotations

from ferrymq.codec.remoting_codes import ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.rpc_status import InvalidRequest, topic_error_status
from node.topics import TopicError

RESPONSE_CODES: dict[int, ResponseCode] = {
    pb.OK: ResponseCode.SUCCESS,
    # The request's own fields (a queue that does not exist, a field out of range): RocketMQ
    # answers SYSTEM_ERROR with a remark.
    pb.BAD_REQUEST: ResponseCode.SYSTEM_ERROR,
    pb.ILLEGAL_TOPIC: ResponseCode.SYSTEM_ERROR,
    pb.ILLEGAL_CONSUMER_GROUP: ResponseCode.SYSTEM_ERROR,
    pb.TOPIC_NOT_FOUND: ResponseCode.TOPIC_NOT_EXIST,
    pb.CONSUMER_GROUP_NOT_FOUND: ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    # Permissions: a read-only topic, an identity that may not.
    pb.FORBIDDEN: ResponseCode.NO_PERMISSION,
    pb.UNAUTHORIZED: ResponseCode.NO_PERMISSION,
    # Not the master (or no master): the client retries elsewhere after a route refresh.
    pb.HA_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    # The message itself breaks a rule: retrying cannot help.
    pb.MESSAGE_BODY_EMPTY: ResponseCode.MESSAGE_ILLEGAL,
    pb.MESSAGE_BODY_TOO_LARGE: ResponseCode.MESSAGE_ILLEGAL,
    pb.MESSAGE_PROPERTIES_TOO_LARGE: ResponseCode.MESSAGE_ILLEGAL,
    pb.PAYLOAD_TOO_LARGE: ResponseCode.MESSAGE_ILLEGAL,
    pb.ILLEGAL_MESSAGE_TAG: ResponseCode.MESSAGE_ILLEGAL,
    pb.ILLEGAL_MESSAGE_KEY: ResponseCode.MESSAGE_ILLEGAL,
    pb.ILLEGAL_MESSAGE_ID: ResponseCode.MESSAGE_ILLEGAL,
    pb.ILLEGAL_MESSAGE_GROUP: ResponseCode.MESSAGE_ILLEGAL,
    pb.ILLEGAL_MESSAGE_PROPERTY_KEY: ResponseCode.MESSAGE_ILLEGAL,
    pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: ResponseCode.MESSAGE_ILLEGAL,
    pb.ILLEGAL_DELIVERY_TIME: ResponseCode.MESSAGE_ILLEGAL,
    pb.MESSAGE_CORRUPTED: ResponseCode.MESSAGE_ILLEGAL,
    # Written here, not confirmed in time: results, as in RocketMQ.
    pb.MASTER_PERSISTENCE_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    pb.SLAVE_PERSISTENCE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    # Consumption.
    pb.ILLEGAL_FILTER_EXPRESSION: ResponseCode.SUBSCRIPTION_PARSE_FAILED,
    pb.ILLEGAL_OFFSET: ResponseCode.PULL_OFFSET_MOVED,
    pb.OFFSET_NOT_FOUND: ResponseCode.QUERY_NOT_FOUND,
    pb.MESSAGE_NOT_FOUND: ResponseCode.PULL_NOT_FOUND,
    # POP: a stale, forged or malformed handle, an invisible time out of range.
    pb.INVALID_RECEIPT_HANDLE: ResponseCode.MESSAGE_ILLEGAL,
    pb.ILLEGAL_INVISIBLE_TIME: ResponseCode.MESSAGE_ILLEGAL,
    # Load and the node's own faults (a full disk included).
    pb.TOO_MANY_REQUESTS: ResponseCode.SYSTEM_BUSY,
    pb.INTERNAL_SERVER_ERROR: ResponseCode.SYSTEM_ERROR,
    pb.UNSUPPORTED: ResponseCode.SYSTEM_ERROR,
    pb.CLIENT_ID_REQUIRED: ResponseCode.SYSTEM_ERROR,
}


def response_code(code: int) -> ResponseCode:
    """The RocketMQ code of an ``apache.rocketmq.v2.Code``; SYSTEM_ERROR when unlisted."""
    return RESPONSE_CODES.get(code, ResponseCode.SYSTEM_ERROR)


def refusal(error: InvalidRequest | TopicError) -> tuple[ResponseCode, str]:
    """The RocketMQ code and remark of a refused request."""
    if isinstance(error, TopicError):
        status = topic_error_status(error)
        return response_code(status.code), status.message
    return response_code(error.code), str(error)
