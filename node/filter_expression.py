"""Subscription filter expressions of ``apache.rocketmq.v2.FilterExpression``: tags
(``TagA || TagB``, ``*``), which the store applies while it reads a queue, and SQL92
property filters (``node.sql_filter``), which the node applies to each message read."""

from __future__ import annotations

from dataclasses import dataclass

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.rpc_status import InvalidRequest
from node.sql_filter import Filter, SqlFilterError, compile_sql


@dataclass(frozen=True)
class Selection:
    """What a subscription takes: ``tags`` (None: every tag) for the store's scan, and
    ``sql`` (None: every message) for the messages it returns."""

    tags: list[str] | None = None
    sql: Filter | None = None


def selection(expression: pb.FilterExpression) -> Selection:
    """The selection ``expression`` describes; ILLEGAL_FILTER_EXPRESSION saying what is
    wrong (and, for SQL, where) when it describes none."""
    if expression.type == pb.SQL:
        try:
            return Selection(sql=compile_sql(expression.expression))
        except SqlFilterError as error:
            raise InvalidRequest(pb.ILLEGAL_FILTER_EXPRESSION, f"SQL filter: {error}") from None
    return Selection(tags=tag_filter(expression))


def tag_filter(expression: pb.FilterExpression) -> list[str] | None:
    """Tags of a TAG expression (``TagA || TagB``); None for ``*`` or no expression."""
    if expression.type == pb.SQL:
        raise InvalidRequest(pb.ILLEGAL_FILTER_EXPRESSION, "expected a TAG expression, not SQL")
    text = expression.expression.strip()
    if not text or text == "*":
        return None
    tags = [part.strip() for part in text.split("||")]
    if any(not tag or any(c.isspace() for c in tag) for tag in tags):
        raise InvalidRequest(pb.ILLEGAL_FILTER_EXPRESSION, f"bad tag expression {text!r}")
    return tags
