"""``apache.rocketmq.v2.Status`` values the node answers with.

Every response carries a status: the official clients reject code 0.
"""

from __future__ import annotations

from google.protobuf import duration_pb2

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.topics import TopicError

TOPIC_ERROR_CODES = {
    "ILLEGAL_TOPIC": pb.ILLEGAL_TOPIC,
    "TOPIC_NOT_FOUND": pb.TOPIC_NOT_FOUND,
    "ILLEGAL_CONSUMER_GROUP": pb.ILLEGAL_CONSUMER_GROUP,
    "CONSUMER_GROUP_NOT_FOUND": pb.CONSUMER_GROUP_NOT_FOUND,
    "GROUP_LIMIT": pb.CONSUMER_GROUP_NOT_FOUND,  # not created on first use (routing.metadata)
}


class InvalidRequest(ValueError):
    """A request field is invalid; ``code`` is the ``apache.rocketmq.v2.Code`` to answer."""

    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code


class AccessDenied(InvalidRequest):
    """A caller without valid credentials (``authenticated`` False: UNAUTHORIZED) or
    without a permission (FORBIDDEN); the message says which, never a secret."""

    def __init__(self, authenticated: bool, message: str) -> None:
        super().__init__(pb.FORBIDDEN if authenticated else pb.UNAUTHORIZED, message)
        self.authenticated = authenticated


def status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message or pb.Code.Name(code))


OK = status(pb.OK)


def topic_error_status(error: TopicError) -> pb.Status:
    return status(TOPIC_ERROR_CODES.get(error.reason, pb.BAD_REQUEST), str(error))


def seconds_of(duration: duration_pb2.Duration) -> float:
    return duration.seconds + duration.nanos / 1e9
