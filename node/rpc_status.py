"""``apache.rocketmq.v2.Status`` values the node answers with.

Every response carries a status: the official clients reject code 0.
"""

from __future__ import annotations

from google.protobuf import duration_pb2

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.topics import TopicError
from store.results import PutResult, PutStatus

STORE_STATUS_CODES = {
    PutStatus.MESSAGE_ILLEGAL: pb.BAD_REQUEST,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: pb.MESSAGE_PROPERTIES_TOO_LARGE,
    PutStatus.DISK_FULL: pb.INTERNAL_SERVER_ERROR,
    PutStatus.FLUSH_DISK_TIMEOUT: pb.MASTER_PERSISTENCE_TIMEOUT,
    PutStatus.SERVICE_NOT_AVAILABLE: pb.HA_NOT_AVAILABLE,
    PutStatus.FLUSH_SLAVE_TIMEOUT: pb.SLAVE_PERSISTENCE_TIMEOUT,
    PutStatus.IN_SYNC_REPLICAS_NOT_ENOUGH: pb.HA_NOT_AVAILABLE,
}
TOPIC_ERROR_CODES = {
    "ILLEGAL_TOPIC": pb.ILLEGAL_TOPIC,
    "TOPIC_NOT_FOUND": pb.TOPIC_NOT_FOUND,
    "ILLEGAL_CONSUMER_GROUP": pb.ILLEGAL_CONSUMER_GROUP,
    "CONSUMER_GROUP_NOT_FOUND": pb.CONSUMER_GROUP_NOT_FOUND,
}


def status(code: int, message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message or pb.Code.Name(code))


OK = status(pb.OK)


def topic_error_status(error: TopicError) -> pb.Status:
    return status(TOPIC_ERROR_CODES.get(error.reason, pb.BAD_REQUEST), str(error))


def seconds_of(duration: duration_pb2.Duration) -> float:
    return duration.seconds + duration.nanos / 1e9


def store_failure(result: PutResult) -> pb.Status:
    """The status for a put that did not succeed."""
    code = STORE_STATUS_CODES.get(result.status, pb.INTERNAL_SERVER_ERROR)
    return status(code, result.error or result.status.value)
