"""Subscription filter expressions of ``apache.rocketmq.v2.FilterExpression``: tags
(``TagA || TagB``, ``*``), which the store applies while it reads a queue, and SQL92
property filters (``node.sql_filter``), which the node applies to each message read.

Both are capped in length before anything reads them: SQL at ``MAX_EXPRESSION_CHARS``
(``node.sql_filter``), tags at ``MAX_TAG_EXPRESSION_CHARS``. A pull hashes every tag of
its expression and compares each message's tag with them: an expression of a few MiB
(which a remoting frame or a gRPC request can carry) cost a second of the event loop on
every pull that carried it."""

from __future__ import annotations

from dataclasses import dataclass

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.rpc_status import InvalidRequest
from node.sql_filter import Filter, SqlFilterError, compile_sql

# Some 1,500 tags: far more than a subscription names in practice.
MAX_TAG_EXPRESSION_CHARS = 16384


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
    if len(expression.expression) > MAX_TAG_EXPRESSION_CHARS:
        raise InvalidRequest(
            pb.ILLEGAL_FILTER_EXPRESSION,
            f"the tag expression has {len(expression.expression)} characters, "
            f"the limit is {MAX_TAG_EXPRESSION_CHARS}",
        )
    text = expression.expression.strip()
    if not text or text == "*":
        return None
    tags = [part.strip() for part in text.split("||")]
    if any(not tag or any(c.isspace() for c in tag) for tag in tags):
        raise InvalidRequest(pb.ILLEGAL_FILTER_EXPRESSION, f"bad tag expression {text!r}")
    return tags
