"""Every pattern a node applies to what clients and peers send runs in linear time: each
is fed 200,000 characters built to make a backtracking matcher retry (a long run that
nearly matches, then fails at its end) and must answer at once. The bound (1 s) is
generous: a quadratic matcher takes minutes on such input (the SQL92 filters' old number
patterns held the event loop for 18 s on one 30,000-digit property), a linear one
milliseconds.

Why each one is linear is in docs/security.md ("Patterns applied to what clients and peers
send"); how the SQL filters' number scanner compares with the patterns it replaced, in
test_sql_filter_numbers.py."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import pytest

from ferrymq.codec.errors import InvalidMessageError
from ferrymq.codec.message_id import OFFSET_MESSAGE_ID_PATTERN, parse_offset_message_id
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ha.link_auth import is_nonce
from node import delay_levels, message_rules, receipt_handle, sql_filter
from node.filter_expression import MAX_TAG_EXPRESSION_CHARS, selection
from node.grpc import namespaces
from node.rpc_status import InvalidRequest
from node.sql_filter import SqlFilterError, compile_sql
from routing import acl, metadata
from routing.metadata import TopicError
from store import message as store_message

N = 200_000
BOUND_S = 1.0
TOKENS_BOUND_S = 5.0


def quickly(call: Callable[[], object], bound_s: float = BOUND_S) -> object:
    """What ``call`` returns, asserting it took under ``bound_s``."""
    started = time.perf_counter()
    result = call()
    elapsed = time.perf_counter() - started
    assert elapsed < bound_s, f"took {elapsed:.2f} s"
    return result


def refused(call: Callable[[], object], *errors: type[Exception]) -> None:
    """``call`` raises one of ``errors``, quickly."""

    def attempt() -> None:
        with pytest.raises(errors):
            call()

    quickly(attempt)


DIGITS = "1" * N
# Runs that nearly read as a number and fail at their last character.
NEAR_NUMBERS = [
    DIGITS + "x",
    DIGITS,  # reads as a number: far too long to be one
    "-" + DIGITS + ".",
    DIGITS + "." + DIGITS + "e+",
    "." + DIGITS + "ex",
    DIGITS + "e" + DIGITS + "dd",
    " " * N + "1",
    "1." * (N // 2),
]


# ---- SQL92 filters: a property read as a number ------------------------------------------
@pytest.mark.parametrize("value", NEAR_NUMBERS, ids=range(len(NEAR_NUMBERS)))
@pytest.mark.parametrize(
    ("expression", "other"),
    [
        ("a > 1.5", {}),
        ("a > 1", {}),
        ("a > b", {"b": "1"}),
        ("a BETWEEN 1.0 AND 2.5", {}),
        ("a = 1", {}),
        ("a = 1.0", {}),
        ("b > a", {"b": "1"}),
    ],
)
def test_a_long_property_compared_with_a_number_is_judged_at_once(expression, other, value):
    """Not delivered (it is no number), and no error: a ValueError escaping here failed
    every pull or receive that read the message, so the message held its queue up."""
    matches = compile_sql(expression)
    assert quickly(lambda: matches({"a": value} | other)) is False


def test_a_property_of_more_digits_than_int_reads_is_not_a_number():
    """``int()`` of more than 4,300 digits raises ValueError (Python 3.11's limit on
    converting text to int): a 5,000-digit property once escaped the filter with it."""
    for expression in ("a > 1", "a = 5", "a <> 5", "a BETWEEN 1 AND 9", "a > -1"):
        assert compile_sql(expression)({"a": "1" * 5000}) is False
        assert compile_sql(expression)({"a": "-" + "1" * 5000}) is False


# ---- SQL92 filters: the number scanner and the tokenizer, without the length caps ---------
@pytest.mark.parametrize("text", NEAR_NUMBERS, ids=range(len(NEAR_NUMBERS)))
def test_the_number_scanner_reads_each_character_once(text):
    quickly(lambda: sql_filter._reads_as_long(text))
    quickly(lambda: sql_filter._reads_as_double(text))
    quickly(lambda: sql_filter._number_token(text, 0))


EXPRESSIONS = [
    DIGITS,
    DIGITS + "x",
    "9" * N + "L",
    "1.1" * (N // 3),
    ".5" * (N // 2),
    "1e" * (N // 2),
    "1e+" * (N // 3),
    "'" + "''" * (N // 2),  # a text literal never closed
    "'" + "a" * N,
    "a" * N,
    "a." * (N // 2),
    " " * N,
    "(" * N,
]


@pytest.mark.parametrize("text", EXPRESSIONS, ids=range(len(EXPRESSIONS)))
def test_the_tokenizer_is_linear_on_any_text(text):
    def tokenize() -> None:
        with contextlib.suppress(SqlFilterError):
            sql_filter._tokenize(text)

    # Up to 200,000 tokens, each made by Python code: ~0.2 s here, hence a wider bound.
    quickly(tokenize, TOKENS_BOUND_S)


@pytest.mark.parametrize("text", EXPRESSIONS, ids=range(len(EXPRESSIONS)))
def test_an_expression_longer_than_the_cap_is_refused_before_it_is_read(text):
    refused(lambda: compile_sql(text), SqlFilterError)
    sql = pb.FilterExpression(type=pb.SQL, expression=text)
    refused(lambda: selection(sql), InvalidRequest)


def test_a_tag_expression_longer_than_the_cap_is_refused():
    """One of 4 MiB named ~400,000 tags: every pull with it hashed them all and compared
    each message's tag with the list (a second of the event loop, per pull)."""
    tags = " || ".join(f"t{i}" for i in range(N // 4))
    refused(lambda: selection(pb.FilterExpression(type=pb.TAG, expression=tags)), InvalidRequest)
    at_the_cap = ("t" * 99 + " || ") * (MAX_TAG_EXPRESSION_CHARS // 103) + "t"
    assert len(at_the_cap) <= MAX_TAG_EXPRESSION_CHARS
    kept = selection(pb.FilterExpression(type=pb.TAG, expression=at_the_cap)).tags
    assert kept is not None and len(kept) == MAX_TAG_EXPRESSION_CHARS // 103 + 1


@pytest.mark.parametrize("test", ["CONTAINS", "STARTSWITH", "ENDSWITH"])
def test_a_text_test_with_a_long_near_miss_is_linear(test):
    """The search text comes from the expression (up to 4,096 characters), the property
    from a producer: ``str.find`` switches to a linear search on such input."""
    needle = "a" * 3000 + "b"
    matches = compile_sql(f"a {test} '{needle}'")
    assert quickly(lambda: matches({"a": "a" * N})) is False


# ---- every other pattern applied to input from clients or peers ---------------------------
NEAR_NAMES = [
    "a" * N + "!",
    "a" * N,
    "0" * N + "g",
    "1." * (N // 2),
    "a " * (N // 2) + "\t",  # KEYS: one space apart, then whitespace that is not a space
    "a" * N + " ",
    " " + "a" * N,
    "a  " * (N // 3),
    "h2." + "1" * N,
    "h2.1.1." + "0" * N,
    "%" * N + "\n",
]
PATTERNS = {
    "receipt_handle.HANDLE_PATTERN": receipt_handle.HANDLE_PATTERN,
    "receipt_handle.OLD_PATTERN": receipt_handle.OLD_PATTERN,
    "namespaces.NAMESPACE_PATTERN": namespaces.NAMESPACE_PATTERN,
    "message_rules.KEY_PATTERN": message_rules.KEY_PATTERN,
    "message_rules.KEYS_TEXT": message_rules.KEYS_TEXT,
    "delay_levels.LEVEL_PATTERN": delay_levels.LEVEL_PATTERN,
    "message_id.OFFSET_MESSAGE_ID_PATTERN": OFFSET_MESSAGE_ID_PATTERN,
    "acl.ACCESS_KEY_PATTERN": acl.ACCESS_KEY_PATTERN,
    "metadata.NAME_PATTERN": metadata.NAME_PATTERN,
    "metadata.NODE_NAME_PATTERN": metadata.NODE_NAME_PATTERN,
    "store.message.TOPIC_PATTERN": store_message.TOPIC_PATTERN,
    "sql_filter._TOKEN": sql_filter._TOKEN,
    "sql_filter._DIGIT_RUN": sql_filter._DIGIT_RUN,
}


@pytest.mark.parametrize("text", NEAR_NAMES, ids=range(len(NEAR_NAMES)))
@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_each_pattern_is_linear_on_a_long_near_miss(name, text):
    pattern = PATTERNS[name]
    quickly(lambda: pattern.fullmatch(text))
    quickly(lambda: pattern.match(text))


HANDLES = receipt_handle.ReceiptHandles(b"k" * 32)
CHECKS: dict[str, tuple[Callable[[str], object], tuple[type[Exception], ...]]] = {
    "receipt handle": (lambda text: HANDLES.decode(text, "t", "g"), (ValueError,)),
    "namespace": (namespaces.checked, (ValueError,)),
    "delay levels": (delay_levels.parse_delay_levels, (ValueError,)),
    "offset message id": (parse_offset_message_id, (ValueError,)),
    "access key": (acl.check_access_key, (TopicError,)),
    "topic or group name": (lambda text: metadata.check_name("TOPIC", text), (TopicError,)),
    "topic of a message": (store_message.validate_topic, (InvalidMessageError,)),
    "replication nonce": (lambda text: is_nonce(text) or _not_a_nonce(), (ValueError,)),
}


def _not_a_nonce() -> None:
    raise ValueError("not a nonce")


@pytest.mark.parametrize("text", NEAR_NAMES, ids=range(len(NEAR_NAMES)))
@pytest.mark.parametrize("check", sorted(CHECKS))
def test_each_check_refuses_a_long_near_miss_at_once(check, text):
    function, errors = CHECKS[check]
    refused(lambda: function(text), *errors)
