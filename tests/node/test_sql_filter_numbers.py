"""How SQL92 filters read numbers (``node.sql_filter``): the scanner that replaced the
regular expressions accepts exactly what they accepted, in properties (a long, a double)
and in expressions (the tokenizer's literals), on every short string over the characters
that matter, on every joining of number fragments, and on generated strings. The old
expressions are kept here, verbatim, as the reference. Past ``MAX_NUMBER_CHARS`` a
property is not a number at all (on purpose: see test_linear_matching.py)."""

from __future__ import annotations

import itertools
import math
import re
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node import sql_filter
from node.sql_filter import (
    LONG_MAX,
    LONG_MIN,
    MAX_NUMBER_CHARS,
    SqlFilterError,
    _as_double,
    _as_long,
    _Mismatch,
    _tokenize,
)

# ---- the reference: the patterns and code the scanner replaced ---------------------------
OLD_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<double>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[dD]?|[0-9]+[eE][+-]?[0-9]+[dD]?
      |[0-9]+[dD])
  | (?P<long>[0-9]+[lL]?)
  | (?P<name>[A-Za-z_$][A-Za-z0-9_$.]*)
  | (?P<text>'(?:[^']|'')*')
  | (?P<op><>|>=|<=|=|>|<|\(|\)|,|-|\+)
    """,
    re.VERBOSE,
)
OLD_LONG_TEXT = re.compile(r"[+-]?[0-9]+")
OLD_DOUBLE_TEXT = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)


def old_as_long(text: str) -> int | None:
    if not OLD_LONG_TEXT.fullmatch(text):
        return None
    value = int(text)
    return value if LONG_MIN <= value <= LONG_MAX else None


def old_as_double(text: str) -> float | None:
    stripped = text.strip()
    if not OLD_DOUBLE_TEXT.fullmatch(stripped):
        return None
    return float(stripped.rstrip("fFdD") if stripped[-1:] in "fFdD" else stripped)


def old_tokens(text: str) -> list[tuple] | str:
    """(kind, text, position, value) of each token but spaces, or the error's message."""
    tokens, position = [], 0
    while position < len(text):
        match = OLD_TOKEN.match(text, position)
        if match is None:
            what = "a text literal is not closed" if text[position] == "'" else "unexpected"
            return f"{what} at {position}"
        kind, raw = match.lastgroup, match.group()
        value = None
        if kind == "long":
            value = in_long_range(int(raw.rstrip("lL")))
        elif kind == "double":
            value = float(raw.rstrip("dD"))
        elif kind == "name" and raw.upper() in sql_filter.KEYWORDS:
            kind, raw = "keyword", raw.upper()
        elif kind == "text":
            value = raw[1:-1].replace("''", "'")
        if kind != "space":
            tokens.append((kind, raw, position, value))
        position = match.end()
    return tokens


def in_long_range(value: int) -> object:
    """A long literal as the parser judges it: beyond the range either way is one answer
    (the new tokenizer does not compute the value of a literal with 20 digits or more)."""
    return value if LONG_MIN <= value <= -LONG_MIN else "beyond"


# ---- the new code, in the same shapes ---------------------------------------------------
def new_as_long(text: str) -> int | None:
    try:
        return _as_long(text)
    except _Mismatch:
        return None


def new_as_double(text: str) -> float | None:
    try:
        return _as_double(text)
    except _Mismatch:
        return None


def new_tokens(text: str) -> list[tuple] | str:
    try:
        tokens = _tokenize(text)
    except SqlFilterError as error:
        what = "a text literal is not closed" if "not closed" in str(error) else "unexpected"
        return f"{what} at {error.position}"
    found = []
    for token in tokens[:-1]:  # the end token has no counterpart
        value = token.value
        if token.kind == "long":
            value = in_long_range(value)
        found.append((token.kind, token.text, token.position, value))
    return found


def same_number(old: float | None, new: float | None) -> bool:
    if old is None or new is None:
        return old is new
    return old == new or (math.isnan(old) and math.isnan(new))


def assert_reads_alike(text: str) -> None:
    assert new_as_long(text) == old_as_long(text), text
    assert same_number(old_as_double(text), new_as_double(text)), text
    assert new_tokens(text) == old_tokens(text), text


# ---- what is compared ---------------------------------------------------------------------
ALPHABET = "01.eE+-dDfFlLx' "
FRAGMENTS = [
    "",
    "0",
    "7",
    "123",
    "00",
    ".",
    "e",
    "E",
    "e+",
    "e-",
    "+",
    "-",
    "d",
    "F",
    "l",
    "L",
    "NaN",
    "Infinity",
    " ",
    "\t",
    "\u00a0",  # Unicode whitespace: strip() removes it around a double
    "x",
    "\u0663",  # ARABIC-INDIC DIGIT THREE: not a digit here
    "1.5",
    ".5",
    "1e3",
]


def test_every_short_string_reads_as_it_did():
    for length in range(5):
        for characters in itertools.product(ALPHABET, repeat=length):
            assert_reads_alike("".join(characters))


def test_every_joining_of_three_number_fragments_reads_as_it_did():
    for parts in itertools.product(FRAGMENTS, repeat=3):
        assert_reads_alike("".join(parts))


@settings(max_examples=1500, deadline=None, derandomize=True)
@given(
    st.one_of(
        st.text(alphabet=ALPHABET + "NaIfinty٣\u00a0\t\n$_(),<>=", max_size=40),
        st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join),
    )
)
def test_generated_strings_read_as_they_did(text):
    assert_reads_alike(text)


@pytest.mark.parametrize(
    ("text", "long", "double"),
    [
        ("12", 12, 12.0),
        ("+12", 12, 12.0),
        ("-0012", -12, -12.0),
        ("1.", None, 1.0),
        (".5", None, 0.5),
        (".", None, None),
        ("1e", None, None),
        ("1e+", None, None),
        ("+1.5e-3f", None, 0.0015),
        ("2D", None, 2.0),
        ("2L", None, None),  # a long literal's suffix is not a property's
        ("1.5dd", None, None),
        ("NaN", None, math.nan),
        ("-Infinity", None, -math.inf),
        ("NaNd", None, None),
        (" 1.5\t", None, 1.5),  # a double is read stripped, a long is not
        (" 1", None, 1.0),
        ("1_000", None, None),
        ("\u0663", None, None),
        ("9223372036854775807", LONG_MAX, 9.223372036854776e18),
        ("9223372036854775808", None, 9.223372036854776e18),
        ("0" * (MAX_NUMBER_CHARS - 1) + "7", 7, 7.0),  # as long as a number may be
        ("0" * MAX_NUMBER_CHARS + "7", None, None),  # longer: not a number
        (" " * MAX_NUMBER_CHARS + "7", None, None),
    ],
)
def test_what_a_property_reads_as(text, long, double):
    assert new_as_long(text) == long
    assert same_number(new_as_double(text), double)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("12L", [("long", "12L", 0, 12)]),
        ("1.e3d", [("double", "1.e3d", 0, 1000.0)]),
        (
            "1e+x",
            [
                ("long", "1", 0, 1),
                ("name", "e", 1, None),
                ("op", "+", 2, None),
                ("name", "x", 3, None),
            ],
        ),
        (".5.5", [("double", ".5", 0, 0.5), ("double", ".5", 2, 0.5)]),
        ("a.5", [("name", "a.5", 0, None)]),
        ("1" * 30, [("long", "1" * 30, 0, "beyond")]),
        ("0" * 30 + "1", [("long", "0" * 30 + "1", 0, 1)]),
    ],
)
def test_what_an_expression_reads_as(text, tokens):
    assert new_tokens(text) == old_tokens(text) == tokens


def test_a_long_literal_too_long_for_int_is_beyond_the_range_not_an_internal_error():
    """``int()`` refuses more digits than ``sys.get_int_max_str_digits()`` (4,300 unless
    lowered; 640 at least) with a ValueError, which no caller of ``compile_sql`` expects:
    the tokenizer no longer asks it for the value of a literal beyond a long anyway."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)  # as PYTHONINTMAXSTRDIGITS=640 would
    try:
        for digits in ("9" * 1000, "0" * 1000 + "7" * 20, "1" + "0" * 4000):
            for sign in ("", "-"):
                with pytest.raises(SqlFilterError, match="beyond the range of a long"):
                    sql_filter.compile_sql(f"a > {sign}{digits}")
        assert sql_filter.compile_sql("a = " + "0" * 1000 + "7")({"a": "7"})
    finally:
        sys.set_int_max_str_digits(limit)
