"""SQL92 property filters (``node.sql_filter``): every operator, RocketMQ's handling of
missing properties and of text compared with numbers, precise errors, the bounds, and a
property test against a small reference evaluator written here from the rules in the
module's docstring (an AST walked directly, no closures, no shared code)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.filter_expression import selection
from node.rpc_status import InvalidRequest
from node.sql_filter import MAX_DEPTH, MAX_EXPRESSION_CHARS, SqlFilterError, compile_sql


def matches(expression: str, **properties: str) -> bool:
    return compile_sql(expression)(properties)


@pytest.mark.parametrize(
    ("expression", "properties", "expected"),
    [
        # comparisons: text properties read as the number they are compared with
        ("a > 5", {"a": "6"}, True),
        ("a > 5", {"a": "5"}, False),
        ("a >= 5", {"a": "5"}, True),
        ("a < 5", {"a": "-7"}, True),
        ("a <= 5", {"a": "5"}, True),
        ("a <= 5", {"a": "+6"}, False),
        ("a = 5", {"a": "5"}, True),
        ("a = 5", {"a": "05"}, True),
        ("a <> 5", {"a": "6"}, True),
        ("a <> 5", {"a": "5"}, False),
        ("a > 1.5", {"a": "1.75"}, True),
        ("a > 1.5", {"a": "2"}, True),
        ("a = 2.0", {"a": "2"}, True),
        ("a > -2", {"a": "-1"}, True),
        ("a > 1e3", {"a": "1001"}, True),
        ("a < 9223372036854775807", {"a": "9223372036854775806"}, True),
        ("a = 'x'", {"a": "x"}, True),
        ("a = 'x'", {"a": "X"}, False),
        ("a <> 'x'", {"a": "y"}, True),
        ("a = 'it''s'", {"a": "it's"}, True),
        ("a = b", {"a": "1.0", "b": "1"}, False),  # two properties: text equality
        ("a > b", {"a": "10", "b": "9"}, True),  # ... and doubles when ordered
        ("a = TRUE", {"a": "True"}, True),
        ("a = TRUE", {"a": "yes"}, False),
        ("a = FALSE", {"a": "no"}, True),
        ("TAGS = 'TagA'", {"TAGS": "TagA"}, True),
        # a property that does not read as the number: not delivered, whatever else holds
        ("a > 5", {"a": "abc"}, False),
        ("a = 5", {"a": "5.0"}, False),
        ("a > 5 OR b = 'x'", {"a": "abc", "b": "x"}, False),
        ("a > b", {"a": "x", "b": "1"}, False),
        # missing properties are unknown, with or without NOT
        ("a > 5", {}, False),
        ("NOT a > 5", {}, False),
        ("a <> 5", {}, False),
        ("a = 'x'", {}, False),
        ("a = b", {"a": "1"}, False),
        ("a IS NULL", {}, True),
        ("a IS NULL", {"a": ""}, False),
        ("a IS NOT NULL", {"a": ""}, True),
        ("a IS NOT NULL", {}, False),
        ("NOT a IS NULL", {}, False),
        # BETWEEN
        ("a BETWEEN 1 AND 3", {"a": "1"}, True),
        ("a BETWEEN 1 AND 3", {"a": "3"}, True),
        ("a BETWEEN 1 AND 3", {"a": "4"}, False),
        ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
        ("a NOT BETWEEN 1 AND 3", {"a": "2"}, False),
        ("a NOT BETWEEN 1 AND 3", {}, False),
        ("a BETWEEN 1.5 AND 2.5", {"a": "2"}, True),
        # IN
        ("a IN ('x', 'y')", {"a": "y"}, True),
        ("a IN ('x', 'y')", {"a": "z"}, False),
        ("a NOT IN ('x', 'y')", {"a": "z"}, True),
        ("a NOT IN ('x', 'y')", {}, False),
        ("a IN ('1')", {"a": "01"}, False),  # text membership
        # CONTAINS, STARTSWITH, ENDSWITH
        ("a CONTAINS 'ell'", {"a": "hello"}, True),
        ("a NOT CONTAINS 'ell'", {"a": "hello"}, False),
        ("a NOT CONTAINS 'z'", {"a": "hello"}, True),
        ("a NOT CONTAINS 'z'", {}, False),
        ("a STARTSWITH 'he'", {"a": "hello"}, True),
        ("a NOT STARTSWITH 'he'", {"a": "hello"}, False),
        ("a ENDSWITH 'lo'", {"a": "hello"}, True),
        ("a ENDSWITH 'he'", {"a": "hello"}, False),
        # AND, OR, NOT, parentheses, TRUE, FALSE, case
        ("a = '1' AND b = '2'", {"a": "1", "b": "2"}, True),
        ("a = '1' AND b = '2'", {"a": "1", "b": "3"}, False),
        ("a = '1' OR b = '2'", {"a": "0", "b": "2"}, True),
        ("a = '1' OR b = '2'", {"b": "2"}, True),  # unknown OR true
        ("b = '2' OR a = '1'", {"b": "3"}, False),
        ("NOT (a = '1' AND b = '2')", {"a": "1", "b": "3"}, True),
        ("NOT (a = '1' AND b = '2')", {"b": "3"}, False),  # unknown AND false: unknown
        ("NOT (b = '3' AND a = '1')", {"b": "2"}, True),  # false AND unknown: false
        ("NOT a = '1'", {"a": "2"}, True),
        ("a = '1' OR b = '1' AND c = '1'", {"a": "1"}, True),  # AND binds tighter
        ("(a = '1' OR b = '1') AND c = '1'", {"a": "1"}, False),
        ("TRUE", {}, True),
        ("FALSE", {}, False),
        ("NOT FALSE", {}, True),
        ("a between 1 and 3 and b is not null", {"a": "2", "b": "x"}, True),
    ],
)
def test_operators(expression, properties, expected):
    assert compile_sql(expression)(properties) is expected


@pytest.mark.parametrize(
    ("expression", "message", "position"),
    [
        ("", "the expression is empty", 0),
        ("a >", "expected a property or a value", 3),
        ("a > 'x'", "> compares numbers, not text 'x'", 4),
        ("a < TRUE", "< compares numbers, not TRUE or FALSE", 4),
        ("TRUE = 'x'", "TRUE or FALSE cannot be compared with text 'x'", 5),
        ("a = NULL", "NULL is not a value", 4),
        ("a", "property a alone is not a condition", 1),
        ("(a = 1", "expected ')'", 6),
        ("a = 1)", "unexpected ')' after a complete condition", 5),
        ("a = 'x", "a text literal is not closed", 4),
        ("a = 1 # 2", "unexpected character '#'", 6),
        ("a BETWEEN 3 AND 1", "lower bound 3 is above its upper bound 1", 10),
        ("a BETWEEN 1 3", "expected AND between the bounds of BETWEEN", 12),
        ("a BETWEEN 'x' AND 3", "BETWEEN takes numbers", 10),
        ("a IN (1, 2)", "IN lists 'text' values", 6),
        ("a IN ('x' 'y')", "expected ',' or ')' in the IN list", 10),
        ("'x' IN ('x')", "IN tests a property", 0),
        ("a CONTAINS 1", "CONTAINS takes a 'text' value", 11),
        ("a NOT = 1", "expected BETWEEN, IN, CONTAINS", 6),
        ("KEYS = 'k'", "KEYS is a system property", 0),
        ("a = 99999999999999999999", "beyond the range of a long", 4),
        ("a = -'x'", "a sign goes before a number", 5),
        ("a IS 1", "expected NULL after IS", 5),
    ],
)
def test_bad_expressions_say_what_and_where(expression, message, position):
    with pytest.raises(SqlFilterError) as refused:
        compile_sql(expression)
    assert message in str(refused.value)
    assert refused.value.position == position
    where = "at the end" if position >= len(expression) else f"at character {position + 1}"
    assert where in str(refused.value)


def test_bounds():
    long_enough = "a = '" + "x" * (MAX_EXPRESSION_CHARS - 6) + "'"
    assert compile_sql(long_enough)({"a": "x" * (MAX_EXPRESSION_CHARS - 6)})
    with pytest.raises(SqlFilterError, match="characters, the limit is"):
        compile_sql(long_enough + " ")
    compile_sql("(" * MAX_DEPTH + "a = 1" + ")" * MAX_DEPTH)
    with pytest.raises(SqlFilterError, match="nesting deeper than"):
        compile_sql("(" * (MAX_DEPTH + 1) + "a = 1" + ")" * (MAX_DEPTH + 1))
    with pytest.raises(SqlFilterError, match="nesting deeper than"):
        compile_sql("NOT " * (MAX_DEPTH + 1) + "a = 1")
    with pytest.raises(SqlFilterError, match="more than 256 conditions"):
        compile_sql(" OR ".join(["a=1"] * 257))


def test_compiled_once_per_text():
    assert compile_sql("x = 'cached'") is compile_sql("x = 'cached'")


def test_a_receive_with_a_bad_sql_filter_gets_a_precise_status():
    with pytest.raises(InvalidRequest) as refused:
        selection(pb.FilterExpression(type=pb.SQL, expression="a > > 1"))
    assert refused.value.code == pb.ILLEGAL_FILTER_EXPRESSION
    assert str(refused.value).startswith("SQL filter: expected a property or a value")
    assert "at character 5" in str(refused.value)
    chosen = selection(pb.FilterExpression(type=pb.SQL, expression="a = 'x'"))
    assert chosen.tags is None and chosen.sql({"a": "x"})
    assert selection(pb.FilterExpression(type=pb.TAG, expression="A || B")).tags == ["A", "B"]


# ---- the property test ------------------------------------------------------------------
NAMES = ("a", "b", "c")
TEXTS = ("x", "y", "1", "2", "2.5", "-3", "true", "it's", "")
LONGS = (-3, 0, 1, 2, 7)
DOUBLES = (-1.5, 0.0, 2.5, 7.25)


def render_literal(value) -> str:
    if value is True:
        return "TRUE"
    if value is False:
        return "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


@st.composite
def numbers(draw):
    return draw(st.sampled_from(LONGS) | st.sampled_from(DOUBLES))


@st.composite
def operands(draw, numeric: bool):
    """("prop", name) or ("lit", value)."""
    if draw(st.booleans()):
        return ("prop", draw(st.sampled_from(NAMES)))
    if numeric:
        return ("lit", draw(numbers()))
    return ("lit", draw(st.sampled_from(TEXTS) | numbers() | st.booleans()))


@st.composite
def predicates(draw):
    kind = draw(st.sampled_from(["cmp", "eq", "between", "in", "null", "text", "const"]))
    name = draw(st.sampled_from(NAMES))
    negated = draw(st.booleans())
    if kind == "cmp":
        symbol = draw(st.sampled_from([">", ">=", "<", "<="]))
        return ("cmp", symbol, draw(operands(True)), draw(operands(True)))
    if kind == "eq":
        left, right = draw(operands(False)), draw(operands(False))
        if left[0] == right[0] == "lit" and isinstance(left[1], bool) != isinstance(right[1], bool):
            right = ("prop", name)
        return ("eq", draw(st.sampled_from(["=", "<>"])), left, right)
    if kind == "between":
        low, high = sorted([draw(numbers()), draw(numbers())])
        return ("between", negated, ("prop", name), low, high)
    if kind == "in":
        return ("in", negated, name, draw(st.lists(st.sampled_from(TEXTS), min_size=1, max_size=3)))
    if kind == "null":
        return ("null", negated, name)
    if kind == "text":
        test = draw(st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH"]))
        return ("text", negated, test, name, draw(st.sampled_from(TEXTS)))
    return ("const", draw(st.booleans()))


conditions = st.recursive(
    predicates(),
    lambda inner: st.one_of(
        st.tuples(st.just("not"), inner),
        st.tuples(st.sampled_from(["and", "or"]), inner, inner),
    ),
    max_leaves=8,
)


def render(node) -> str:
    kind = node[0]
    if kind == "not":
        return f"NOT ({render(node[1])})"
    if kind in ("and", "or"):
        return f"({render(node[1])}) {kind.upper()} ({render(node[2])})"
    if kind in ("cmp", "eq"):
        return f"{render_operand(node[2])} {node[1]} {render_operand(node[3])}"
    if kind == "between":
        word = "NOT BETWEEN" if node[1] else "BETWEEN"
        return f"{render_operand(node[2])} {word} {node[3]!r} AND {node[4]!r}"
    if kind == "in":
        items = ", ".join(render_literal(v) for v in node[3])
        return f"{node[2]} {'NOT IN' if node[1] else 'IN'} ({items})"
    if kind == "null":
        return f"{node[2]} IS {'NOT NULL' if node[1] else 'NULL'}"
    if kind == "text":
        return f"{node[3]} {'NOT ' if node[1] else ''}{node[2]} {render_literal(node[4])}"
    return render_literal(node[1])


def render_operand(operand) -> str:
    return operand[1] if operand[0] == "prop" else render_literal(operand[1])


class Mismatch(Exception):
    pass


def reference(node, properties):
    """True, False or None (unknown); Mismatch when a property does not read as the number
    (or boolean) it is compared with."""
    kind = node[0]
    if kind == "not":
        inner = reference(node[1], properties)
        return None if inner is None else not inner
    if kind == "and":
        left = reference(node[1], properties)
        if left is None or left is False:
            return left
        return reference(node[2], properties)
    if kind == "or":
        if reference(node[1], properties) is True:
            return True
        return reference(node[2], properties)
    if kind == "const":
        return node[1]
    if kind == "null":
        missing = node[2] not in properties
        return not missing if node[1] else missing
    if kind in ("in", "text"):
        name = node[2] if kind == "in" else node[3]
        if name not in properties:
            return None
        value = properties[name]
        if kind == "in":
            found = value in node[3]
        else:
            found = {
                "CONTAINS": node[4] in value,
                "STARTSWITH": value.startswith(node[4]),
                "ENDSWITH": value.endswith(node[4]),
            }[node[2]]
        return found != node[1]
    if kind == "between":
        low = ("cmp", ">=", node[2], ("lit", node[3]))
        high = ("cmp", "<=", node[2], ("lit", node[4]))
        if node[1]:
            return reference(
                (
                    "or",
                    ("cmp", "<", node[2], ("lit", node[3])),
                    ("cmp", ">", node[2], ("lit", node[4])),
                ),
                properties,
            )
        return reference(("and", low, high), properties)
    left, right = value_of(node[2], properties), value_of(node[3], properties)
    if left is None or right is None:
        return None
    if kind == "cmp":
        a, b = as_numbers(left, right)
        return {">": a > b, ">=": a >= b, "<": a < b, "<=": a <= b}[node[1]]
    equal = values_equal(left, right)
    return equal if node[1] == "=" else not equal


def value_of(operand, properties):
    return properties.get(operand[1]) if operand[0] == "prop" else operand[1]


def read_number(text: str, like):
    try:
        if isinstance(like, int) and not isinstance(like, bool):
            if not text.lstrip("+-").isdigit() or text.count("+") + text.count("-") > 1:
                raise Mismatch
            return int(text)
        return float(text)
    except ValueError:
        raise Mismatch from None


def as_numbers(left, right):
    if isinstance(left, str) and isinstance(right, str):
        return read_number(left, 0.0), read_number(right, 0.0)
    if isinstance(left, str):
        left = read_number(left, right)
    if isinstance(right, str):
        right = read_number(right, left)
    return left, right


def values_equal(left, right) -> bool:
    if isinstance(left, str) and isinstance(right, str):
        return left == right
    if isinstance(left, str) or isinstance(right, str):
        text, other = (left, right) if isinstance(left, str) else (right, left)
        if isinstance(other, bool):
            return (text.lower() == "true") == other
        return read_number(text, other) == other
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    return float(left) == float(right)


def reference_matches(node, properties) -> bool:
    try:
        return reference(node, properties) is True
    except Mismatch:
        return False


property_sets = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(TEXTS), max_size=3)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(conditions, st.lists(property_sets, min_size=1, max_size=6))
def test_agrees_with_the_reference_evaluator(node, messages):
    text = render(node)
    compiled = compile_sql(text)
    for properties in messages:
        assert compiled(properties) is reference_matches(node, properties), (text, properties)
