"""Subscription filter expressions of ``apache.rocketmq.v2.FilterExpression``."""

from __future__ import annotations

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.rpc_status import InvalidRequest


def tag_filter(expression: pb.FilterExpression) -> list[str] | None:
    """Tags of a TAG expression (``TagA || TagB``); None for ``*`` or no expression."""
    if expression.type == pb.SQL:
        raise InvalidRequest(pb.ILLEGAL_FILTER_EXPRESSION, "SQL filters are not supported")
    text = expression.expression.strip()
    if not text or text == "*":
        return None
    tags = [part.strip() for part in text.split("||")]
    if any(not tag or any(c.isspace() for c in tag) for tag in tags):
        raise InvalidRequest(pb.ILLEGAL_FILTER_EXPRESSION, f"bad tag expression {text!r}")
    return tags
