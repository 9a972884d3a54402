"""SQL92 property filters, RocketMQ's subset: ``compile_sql(text)`` parses an expression once
and returns a function of a message's properties that says whether to deliver it.

Shared by every protocol that subscribes with SQL (the 5.x ``FilterExpression`` of type SQL
today, the 4.x remoting ``SQL92`` subscriptions later), so it knows nothing of gRPC: a bad
expression raises ``SqlFilterError``, which says what is wrong and at which character.

The language (keywords in any case)::

    condition  := or
    or         := and (OR and)*
    and        := not (AND not)*
    not        := NOT not | predicate
    predicate  := value (= | <> | > | >= | < | <=) value
                | value [NOT] BETWEEN value AND value
                | property [NOT] IN ('text', ...)
                | property IS [NOT] NULL
                | property [NOT] (CONTAINS | STARTSWITH | ENDSWITH) 'text'
                | TRUE | FALSE | ( condition )
    value      := property | 'text' ('' is a quote) | [-]long | [-]double | TRUE | FALSE

A property is a user property of the message, or ``TAGS`` (its tag); other system
properties are refused by name. What a message is given (RocketMQ's semantics, which come
from ActiveMQ's selectors; docs/architecture.md, "SQL filters"):

- Properties are text. Compared with a number, a property is read as one: as a long
  (``[+-]digits``) against a long literal, as a double against a double; against TRUE or
  FALSE it is true when it reads ``true`` in any case. Two properties compare as text with
  ``=`` and ``<>``, as doubles with ``<``, ``<=``, ``>``, ``>=``. Text is never ordered:
  ``>`` and the like take numbers only (a text literal there is an error).
- A property that does not read as the number it is compared with makes the whole
  expression false for that message (RocketMQ's evaluation stops with an error there and
  does not deliver it).
- A missing property makes a comparison, BETWEEN, IN, CONTAINS and the like *unknown*,
  with or without NOT (``a <> 1`` and ``a NOT IN ('x')`` are unknown without ``a``);
  ``IS NULL`` is true for it. Unknown is carried as RocketMQ carries it: NOT unknown is
  unknown, ``x AND y`` is unknown when x is, else false when x is false, else y; ``x OR y``
  is true when x is, else y. A message is delivered only when the result is true.
- ``a BETWEEN l AND h`` is ``a >= l AND a <= h`` (l > h is an error); NOT BETWEEN is
  ``a < l OR a > h``.

Where ferrymq differs (on purpose): NOT binds looser than a comparison (``NOT a = 1`` is
``NOT (a = 1)``, as in SQL; RocketMQ's grammar applies it to ``a``), a comparison with a
missing property on either side is unknown (RocketMQ answers false when only the right
side is missing), integer literals are longs (RocketMQ reads small ones as ints, so a
property beyond the int range never matches them there), a property alone is not a
condition (RocketMQ accepts ``a`` and never matches it), and a property longer than
``MAX_NUMBER_CHARS`` characters never reads as a number (Java reads any length).

Bounds: ``MAX_EXPRESSION_CHARS`` characters, ``MAX_DEPTH`` nested parentheses and NOTs,
``MAX_TERMS`` predicates; compiled filters are cached by text (``MAX_CACHED``), so a
subscription's expression is parsed once however many receives carry it. Reading an
expression, and a property as a number, is linear in its length (no pattern here can
backtrack), and a property is measured before it is read: a message's properties, which
any producer writes, cost a filter at most one pass over them.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping

from ferrymq.codec.properties import PROPERTY_TAGS, SYSTEM_PROPERTY_NAMES

MAX_EXPRESSION_CHARS = 4096
MAX_DEPTH = 32
MAX_TERMS = 256
MAX_CACHED = 1024

Properties = Mapping[str, str]
Filter = Callable[[Properties], bool]
# A condition's value: True, False or None (unknown).
Condition = Callable[[Properties], bool | None]
# A value: text, int (long), float (double), bool, or None (a missing property).
Value = Callable[[Properties], object]

KEYWORDS = frozenset(
    {
        "AND",
        "OR",
        "NOT",
        "BETWEEN",
        "IN",
        "IS",
        "NULL",
        "TRUE",
        "FALSE",
        "CONTAINS",
        "STARTSWITH",
        "ENDSWITH",
    }
)
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
# Every pattern here runs in linear time on any text: each repeat is of one character
# class (or of two alternatives that cannot start alike, in ``text``) and nothing after it
# can make it give back what it took but the end of its alternative. Numbers, whose old
# patterns nested ambiguous repeats (``[0-9]+\.?[0-9]*`` split a run of digits every way
# before failing: a 30,000-digit property held the event loop for 18 s), are read by the
# scanner below instead, which looks at every character once.
_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<name>[A-Za-z_$][A-Za-z0-9_$.]*)
  | (?P<text>'(?:[^']|'')*')
  | (?P<op><>|>=|<=|=|>|<|\(|\)|,|-|\+)
    """,
    re.VERBOSE,
)
_DIGIT_RUN = re.compile(r"[0-9]*")  # ASCII digits only, as every number here
# The longest text a property may have and still read as a number. ``Long.toString`` and
# ``Double.toString`` write at most 20 and 24 characters; this leaves room for padding
# and zeros, stays below the smallest limit Python may put on ``int()`` (640 digits), and
# makes reading a property as a number cost nothing whatever the property holds.
MAX_NUMBER_CHARS = 128
# A long literal of more significant digits is beyond a long with either sign: its value
# is not computed (``int()`` of a long run of digits is slow, and refused past
# ``sys.get_int_max_str_digits()``), this stands for it and fails the range check.
_LONG_DIGITS_MAX = 19
_BEYOND_LONG = 10**_LONG_DIGITS_MAX


class SqlFilterError(ValueError):
    """An expression that is not a filter: ``position`` is the 0-based character where the
    problem is; the message quotes it."""

    def __init__(self, message: str, text: str, position: int) -> None:
        self.position = position
        near = text[position : position + 20] or "the end"
        where = (
            f"at character {position + 1} (near {near!r})"
            if position < len(text)
            else ("at the end")
        )
        super().__init__(f"{message} {where}")


class _Mismatch(Exception):
    """A property that does not read as what it is compared with: the message is not
    delivered (RocketMQ's evaluation fails there)."""


def compile_sql(text: str) -> Filter:
    """The filter ``text`` describes (cached); ``SqlFilterError`` when it is not one."""
    found = _cache.get(text)
    if found is not None:
        _cache.move_to_end(text)
        return found
    compiled = _Parser(text).parse()
    _cache[text] = compiled
    if len(_cache) > MAX_CACHED:
        _cache.popitem(last=False)
    return compiled


_cache: OrderedDict[str, Filter] = OrderedDict()


# ---- numbers: a scanner that reads each character once ------------------------------------
def _digits_end(text: str, position: int) -> int:
    """Where the run of ASCII digits at ``position`` ends (``position`` when none)."""
    return _DIGIT_RUN.match(text, position).end()


def _exponent_end(text: str, position: int) -> int:
    """Where an exponent ``[eE][+-]?digits`` at ``position`` ends (``position`` when none)."""
    if text[position : position + 1] not in ("e", "E"):
        return position
    digits = position + 2 if text[position + 1 : position + 2] in ("+", "-") else position + 1
    end = _digits_end(text, digits)
    return end if end > digits else position


def _suffix_end(text: str, position: int, suffixes: str) -> int:
    """``position`` past one of ``suffixes`` there, if there is one."""
    found = text[position : position + 1]
    return position + 1 if found and found in suffixes else position


def _fraction_end(text: str, position: int) -> int:
    """Where a double's tail ends from ``position``: the digits after its point, an
    exponent, a ``d``."""
    return _suffix_end(text, _exponent_end(text, _digits_end(text, position)), "dD")


def _number_token(text: str, start: int) -> tuple[str, int] | None:
    """(``long`` or ``double``, end) of the literal at ``start``, or None: ``12``, ``12L``;
    ``1.``, ``1.5``, ``.5``, ``1e3``, ``1.5E-3d``, ``2d`` (a run of digits followed by a
    point, an exponent or a ``d`` is a double)."""
    digits_end = _digits_end(text, start)
    if digits_end == start:  # no integer part: ".digits" or nothing
        if text[start : start + 1] != "." or _digits_end(text, start + 1) == start + 1:
            return None
        return "double", _fraction_end(text, start + 1)
    if text[digits_end : digits_end + 1] == ".":
        return "double", _fraction_end(text, digits_end + 1)
    exponent_end = _exponent_end(text, digits_end)
    if exponent_end > digits_end or text[digits_end : digits_end + 1] in ("d", "D"):
        return "double", _suffix_end(text, exponent_end, "dD")
    return "long", _suffix_end(text, digits_end, "lL")


def _reads_as_long(text: str) -> bool:
    """Whether ``text`` is ``[+-]?digits``."""
    start = 1 if text[:1] in ("+", "-") else 0
    end = _digits_end(text, start)
    return start < end == len(text)


def _reads_as_double(text: str) -> bool:
    """Whether ``text`` is ``[+-]?`` then ``NaN``, ``Infinity``, or digits with a point
    (``1.``, ``1.5``, ``.5``) or none, an exponent, one of ``fFdD``: the text of a double."""
    start = 1 if text[:1] in ("+", "-") else 0
    if text[start:] in ("NaN", "Infinity"):
        return True
    end = _digits_end(text, start)
    if text[end : end + 1] == ".":
        fraction_end = _digits_end(text, end + 1)
        if end == start and fraction_end == end + 1:
            return False  # a point alone
        end = fraction_end
    elif end == start:
        return False
    return _suffix_end(text, _exponent_end(text, end), "fFdD") == len(text)


def _long_literal(digits: str) -> int:
    """The value of a literal's digits; ``_BEYOND_LONG`` for more digits than a long has."""
    significant = digits.lstrip("0")
    if len(significant) > _LONG_DIGITS_MAX:
        return _BEYOND_LONG
    return int(significant or "0")


# ---- values and their comparison ---------------------------------------------------------
def _as_long(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS or not _reads_as_long(text):
        raise _Mismatch
    value = int(text)
    if not LONG_MIN <= value <= LONG_MAX:
        raise _Mismatch
    return value


def _as_double(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise _Mismatch
    stripped = text.strip()
    if not _reads_as_double(stripped):
        raise _Mismatch
    return float(stripped.rstrip("fFdD") if stripped[-1:] in "fFdD" else stripped)


def _read_as(text: str, kind: type) -> object:
    if kind is int:
        return _as_long(text)
    if kind is float:
        return _as_double(text)
    if kind is bool:
        return text.lower() == "true"
    raise _Mismatch


def _aligned(left: object, right: object, ordered: bool) -> tuple[object, object] | None:
    """Both values as one comparable type; None when they cannot be compared (unequal,
    and unordered)."""
    lt, rt = type(left), type(right)
    if lt is str and rt is str:
        if ordered:
            return _as_double(left), _as_double(right)
        return left, right
    if lt is str:
        left, lt = _read_as(left, rt), rt
    elif rt is str:
        right, rt = _read_as(right, lt), lt
    if lt is rt:
        return left, right
    if lt in (int, float) and rt in (int, float):
        return float(left), float(right)
    return None  # a bool against a number: never equal


def _equal(left: object, right: object) -> bool | None:
    if left is None or right is None:
        return None
    pair = _aligned(left, right, ordered=False)
    return pair is not None and pair[0] == pair[1]


_ORDER = {
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
}


def _ordered(symbol: str, left: Value, right: Value) -> Condition:
    holds = _ORDER[symbol]

    def condition(properties: Properties) -> bool | None:
        lv = left(properties)
        if lv is None:
            return None
        rv = right(properties)
        if rv is None:
            return None
        pair = _aligned(lv, rv, ordered=True)
        if pair is None:
            raise _Mismatch
        return holds(*pair)

    return condition


def _not(inner: Condition) -> Condition:
    def condition(properties: Properties) -> bool | None:
        value = inner(properties)
        return None if value is None else not value

    return condition


def _and(left: Condition, right: Condition) -> Condition:
    def condition(properties: Properties) -> bool | None:
        value = left(properties)
        if not value:  # unknown stays unknown, false stays false
            return value
        return right(properties)

    return condition


def _or(left: Condition, right: Condition) -> Condition:
    def condition(properties: Properties) -> bool | None:
        if left(properties) is True:
            return True
        return right(properties)

    return condition


def _constant(value: bool) -> Condition:
    return lambda properties: value


def _text_test(name: str, test: Callable[[str], bool], negated: bool) -> Condition:
    def condition(properties: Properties) -> bool | None:
        value = properties.get(name)
        if value is None:
            return None
        return test(value) is not negated

    return condition


# ---- the parser ----------------------------------------------------------------------------
class _Token:
    __slots__ = ("kind", "position", "text", "value")

    def __init__(self, kind: str, text: str, position: int, value: object = None) -> None:
        self.kind = kind  # long, double, text, name, keyword, op, end
        self.text = text
        self.position = position
        self.value = value


def _tokenize(text: str) -> list[_Token]:
    """The tokens of ``text``, ending with an ``end`` token; ``SqlFilterError`` at the
    first character that starts none. Linear in ``len(text)``: see ``_TOKEN``."""
    tokens = []
    position = 0
    while position < len(text):
        number = _number_token(text, position)
        if number is not None:
            kind, end = number
            tokens.append(_number_literal(kind, text[position:end], position))
            position = end
            continue
        match = _TOKEN.match(text, position)
        if match is None:
            if text[position] == "'":
                raise SqlFilterError("a text literal is not closed", text, position)
            raise SqlFilterError(f"unexpected character {text[position]!r}", text, position)
        kind, raw = match.lastgroup, match.group()
        if kind == "name" and raw.upper() in KEYWORDS:
            tokens.append(_Token("keyword", raw.upper(), position))
        elif kind == "text":
            tokens.append(_Token("text", raw, position, raw[1:-1].replace("''", "'")))
        elif kind != "space":
            tokens.append(_Token(kind, raw, position))
        position = match.end()
    tokens.append(_Token("end", "", len(text)))
    return tokens


def _number_literal(kind: str, raw: str, position: int) -> _Token:
    value = _long_literal(raw.rstrip("lL")) if kind == "long" else float(raw.rstrip("dD"))
    return _Token(kind, raw, position, value)


class _Operand:
    """A value in the expression: ``literal`` holds a literal's value (None: a property)."""

    __slots__ = ("literal", "name", "position", "value")

    def __init__(self, value: Value, position: int, name: str = "", literal: object = None):
        self.value = value
        self.position = position
        self.name = name
        self.literal = literal

    @property
    def is_property(self) -> bool:
        return bool(self.name)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        if not isinstance(text, str):
            raise SqlFilterError("the expression is not text", "", 0)
        if len(text) > MAX_EXPRESSION_CHARS:
            raise SqlFilterError(
                f"the expression has {len(text)} characters, the limit is {MAX_EXPRESSION_CHARS}",
                text,
                MAX_EXPRESSION_CHARS,
            )
        self.tokens = _tokenize(text)
        self.index = 0
        self.depth = 0
        self.terms = 0

    def fail(self, message: str, position: int | None = None) -> SqlFilterError:
        return SqlFilterError(
            message, self.text, self.peek.position if position is None else position
        )

    @property
    def peek(self) -> _Token:
        return self.tokens[self.index]

    def take(self) -> _Token:
        token = self.tokens[self.index]
        if token.kind != "end":
            self.index += 1
        return token

    def at(self, kind: str, text: str | None = None) -> bool:
        token = self.peek
        return token.kind == kind and (text is None or token.text == text)

    def accept(self, kind: str, text: str | None = None) -> _Token | None:
        return self.take() if self.at(kind, text) else None

    def expect(self, kind: str, text: str, what: str) -> _Token:
        if not self.at(kind, text):
            raise self.fail(f"expected {what}, found {self.describe(self.peek)}")
        return self.take()

    @staticmethod
    def describe(token: _Token) -> str:
        return "the end of the expression" if token.kind == "end" else repr(token.text)

    def deeper(self, position: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"nesting deeper than {MAX_DEPTH} levels", position)

    # ---- grammar -------------------------------------------------------------------------
    def parse(self) -> Filter:
        if self.at("end"):
            raise self.fail("the expression is empty")
        condition = self.or_()
        if not self.at("end"):
            raise self.fail(f"unexpected {self.describe(self.peek)} after a complete condition")

        def matches(properties: Properties) -> bool:
            try:
                return condition(properties) is True
            except _Mismatch:
                return False

        return matches

    def or_(self) -> Condition:
        condition = self.and_()
        while self.accept("keyword", "OR"):
            condition = _or(condition, self.and_())
        return condition

    def and_(self) -> Condition:
        condition = self.not_()
        while self.accept("keyword", "AND"):
            condition = _and(condition, self.not_())
        return condition

    def not_(self) -> Condition:
        token = self.accept("keyword", "NOT")
        if token is None:
            return self.predicate()
        self.deeper(token.position)
        inner = self.not_()
        self.depth -= 1
        return _not(inner)

    def predicate(self) -> Condition:
        start = self.peek
        self.terms += 1
        if self.terms > MAX_TERMS:
            raise self.fail(f"more than {MAX_TERMS} conditions")
        if start.kind == "op" and start.text == "(":
            self.take()
            self.deeper(start.position)
            condition = self.or_()
            self.depth -= 1
            self.expect("op", ")", "')'")
            return condition
        left = self.operand()
        token = self.peek
        if token.kind == "op" and token.text in ("=", "<>", ">", ">=", "<", "<="):
            self.take()
            right = self.operand()
            return self.comparison(token, left, right)
        negated = self.accept("keyword", "NOT") is not None
        if self.accept("keyword", "BETWEEN"):
            return self.between(left, negated)
        if self.accept("keyword", "IN"):
            return self.in_(left, negated)
        for keyword, test in (
            ("CONTAINS", str.__contains__),
            ("STARTSWITH", str.startswith),
            ("ENDSWITH", str.endswith),
        ):
            if self.accept("keyword", keyword):
                return self.text_test(left, keyword, test, negated)
        if negated:
            raise self.fail("expected BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH after NOT")
        if self.accept("keyword", "IS"):
            return self.is_null(left)
        if left.literal is not None and isinstance(left.literal, bool):
            return _constant(left.literal)
        if left.is_property:
            raise self.fail(
                f"property {left.name} alone is not a condition: compare it "
                f"(e.g. {left.name} = 'x' or {left.name} IS NOT NULL)"
            )
        raise self.fail(f"expected a comparison, found {self.describe(self.peek)}")

    def operand(self) -> _Operand:
        token = self.take()
        if token.kind == "op" and token.text in ("-", "+"):
            number = self.take()
            if number.kind not in ("long", "double"):
                raise self.fail(
                    f"a sign goes before a number, not {self.describe(number)}", number.position
                )
            value = -number.value if token.text == "-" else number.value
            return self.literal(value, token.position)
        if token.kind in ("long", "double"):
            return self.literal(token.value, token.position)
        if token.kind == "text":
            return self.literal(token.value, token.position)
        if token.kind == "keyword" and token.text in ("TRUE", "FALSE"):
            return self.literal(token.text == "TRUE", token.position)
        if token.kind == "keyword" and token.text == "NULL":
            raise self.fail("NULL is not a value: use IS NULL or IS NOT NULL", token.position)
        if token.kind == "name":
            name = token.text
            if name in SYSTEM_PROPERTY_NAMES and name != PROPERTY_TAGS:
                raise self.fail(
                    f"{name} is a system property: filters read user properties and TAGS",
                    token.position,
                )
            return _Operand(lambda properties: properties.get(name), token.position, name=name)
        raise self.fail(
            f"expected a property or a value, found {self.describe(token)}", token.position
        )

    def literal(self, value: object, position: int) -> _Operand:
        if type(value) is int and not LONG_MIN <= value <= LONG_MAX:
            raise self.fail("the number is beyond the range of a long", position)
        if type(value) is float and not math.isfinite(value):
            raise self.fail("the number is beyond the range of a double", position)
        return _Operand(lambda properties: value, position, literal=value)

    def comparison(self, token: _Token, left: _Operand, right: _Operand) -> Condition:
        symbol = token.text
        if symbol in _ORDER:
            for side in (left, right):
                if side.literal is not None and type(side.literal) not in (int, float):
                    raise self.fail(
                        f"{symbol} compares numbers, not {_kind(side.literal)}", side.position
                    )
            return _ordered(symbol, left.value, right.value)
        if (
            left.literal is not None
            and right.literal is not None
            and (type(left.literal) is bool) != (type(right.literal) is bool)
        ):
            raise self.fail(
                f"{_kind(left.literal)} cannot be compared with {_kind(right.literal)}",
                token.position,
            )
        lv, rv = left.value, right.value

        def equal(properties: Properties) -> bool | None:
            return _equal(lv(properties), rv(properties))

        return equal if symbol == "=" else _not(equal)

    def between(self, value: _Operand, negated: bool) -> Condition:
        low = self.operand()
        self.expect("keyword", "AND", "AND between the bounds of BETWEEN")
        high = self.operand()
        for side in (value, low, high):
            if side.literal is not None and type(side.literal) not in (int, float):
                raise self.fail(f"BETWEEN takes numbers, not {_kind(side.literal)}", side.position)
        if low.literal is not None and high.literal is not None and low.literal > high.literal:
            raise self.fail(
                f"BETWEEN's lower bound {low.literal} is above its upper bound {high.literal}",
                low.position,
            )
        if negated:
            return _or(
                _ordered("<", value.value, low.value), _ordered(">", value.value, high.value)
            )
        return _and(_ordered(">=", value.value, low.value), _ordered("<=", value.value, high.value))

    def in_(self, value: _Operand, negated: bool) -> Condition:
        if not value.is_property:
            raise self.fail("IN tests a property", value.position)
        self.expect("op", "(", "'(' after IN")
        members = set()
        while True:
            token = self.take()
            if token.kind != "text":
                raise self.fail(
                    f"IN lists 'text' values, found {self.describe(token)}", token.position
                )
            members.add(token.value)
            if self.accept("op", ")"):
                break
            self.expect("op", ",", "',' or ')' in the IN list")
        return _text_test(value.name, members.__contains__, negated)

    def text_test(self, value: _Operand, keyword: str, test, negated: bool) -> Condition:
        if not value.is_property:
            raise self.fail(f"{keyword} tests a property", value.position)
        token = self.take()
        if token.kind != "text":
            raise self.fail(
                f"{keyword} takes a 'text' value, found {self.describe(token)}", token.position
            )
        search = token.value
        return _text_test(value.name, lambda text: test(text, search), negated)

    def is_null(self, value: _Operand) -> Condition:
        negated = self.accept("keyword", "NOT") is not None
        self.expect("keyword", "NULL", "NULL after IS")
        if not value.is_property:
            return _constant(negated)  # a literal is never null
        name = value.name
        if negated:
            return lambda properties: properties.get(name) is not None
        return lambda properties: properties.get(name) is None


def _kind(literal: object) -> str:
    if type(literal) is bool:
        return "TRUE or FALSE"
    if type(literal) is str:
        return f"text {literal!r}"
    return f"number {literal}"
