"""Hypothesis strategies for protobuf messages, built from their descriptors.

Generic on purpose: the fuzz test draws requests for every RPC of every service from the
request type's descriptor, so a field or an RPC added to a ``.proto`` is fuzzed without
anyone writing a strategy for it. Values lean towards the edges that break parsers and
validators (empty, huge, NUL, non-ASCII strings; integers at their bounds; unknown enum
numbers; bodies at and past the size limit) and towards names that exist on the node
under test, so that requests get past the first lookup into the code behind it.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
UINT32 = (0, 2**32 - 1)
UINT64 = (0, 2**64 - 1)
INTEGER_RANGES = {
    FieldDescriptor.TYPE_INT32: INT32,
    FieldDescriptor.TYPE_SINT32: INT32,
    FieldDescriptor.TYPE_SFIXED32: INT32,
    FieldDescriptor.TYPE_INT64: INT64,
    FieldDescriptor.TYPE_SINT64: INT64,
    FieldDescriptor.TYPE_SFIXED64: INT64,
    FieldDescriptor.TYPE_UINT32: UINT32,
    FieldDescriptor.TYPE_FIXED32: UINT32,
    FieldDescriptor.TYPE_UINT64: UINT64,
    FieldDescriptor.TYPE_FIXED64: UINT64,
}
# Header names the RocketMQ clients send (and an authenticating node reads).
METADATA_KEYS = (
    "authorization",
    "x-mq-date-time",
    "x-mq-client-id",
    "x-mq-request-id",
    "x-mq-language",
    "x-mq-client-version",
    "x-mq-protocol",
    "x-mq-namespace",
    "x-mq-session-token",
)

# Headers the HTTP/2 transport owns: a client library refuses or overrides them.
TRANSPORT_HEADERS = frozenset(
    {"te", "host", "content-type", "user-agent", "connection", "accept-encoding", "upgrade"}
)


@dataclass(frozen=True)
class Pools:
    """Values worth drawing besides random ones: the node's real names and limits."""

    names: tuple[str, ...]  # topics, groups, ids that exist on the node
    body_limit: int  # the node's max_message_body_bytes


def integers_at_bounds(low: int, high: int) -> st.SearchStrategy[int]:
    candidates = (low, low + 1, -1, 0, 1, 60, 1000, high // 2, high - 1, high)
    edges = sorted({v for v in candidates if low <= v <= high})
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


def strings(pools: Pools) -> st.SearchStrategy[str]:
    huge = st.builds(
        lambda unit, count: unit * count,
        st.sampled_from(["a", "é", "\x00", "\U0001f600", "%"]),
        st.sampled_from([128, 4096, 70_000]),
    )
    odd = st.one_of(
        st.just(""),
        st.text(max_size=24),
        st.text(alphabet=string.ascii_letters + string.digits + "%|_-", max_size=130),
        st.builds(
            lambda name, tail: name + tail, st.sampled_from(pools.names), st.text(max_size=3)
        ),
        huge,
    )
    # Half real names: a request needs a real topic and group to get past the lookups.
    return st.one_of(st.sampled_from(pools.names), odd)


def byte_strings(pools: Pools) -> st.SearchStrategy[bytes]:
    sized = st.builds(
        lambda size: b"\xa5" * size,
        st.sampled_from([pools.body_limit - 1, pools.body_limit, pools.body_limit + 1]),
    )
    return st.one_of(st.binary(max_size=64), st.just(b""), sized)


def enum_values(field: FieldDescriptor) -> st.SearchStrategy[int]:
    known = [value.number for value in field.enum_type.values]
    return st.one_of(st.sampled_from(known), integers_at_bounds(*INT32))


def scalars(field: FieldDescriptor, pools: Pools) -> st.SearchStrategy:
    """Values for one element of a non-message field."""
    kind = field.type
    if kind in INTEGER_RANGES:
        return integers_at_bounds(*INTEGER_RANGES[kind])
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_FLOAT:
        return st.floats(width=32)
    if kind == FieldDescriptor.TYPE_DOUBLE:
        return st.floats()
    if kind == FieldDescriptor.TYPE_STRING:
        return strings(pools)
    if kind == FieldDescriptor.TYPE_BYTES:
        return byte_strings(pools)
    if kind == FieldDescriptor.TYPE_ENUM:
        return enum_values(field)
    raise TypeError(f"no strategy for field {field.full_name} of type {kind}")


def message_class(descriptor: Descriptor) -> type[Message]:
    return message_factory.GetMessageClass(descriptor)


def _is_map(field: FieldDescriptor) -> bool:
    return field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry


def _is_repeated(field: FieldDescriptor) -> bool:
    return field.is_repeated


def field_values(field: FieldDescriptor, pools: Pools, depth: int) -> st.SearchStrategy:
    """A whole value for ``field``: a list when repeated, a dict for a map."""
    if _is_map(field):
        key_field = field.message_type.fields_by_name["key"]
        value_field = field.message_type.fields_by_name["value"]
        return st.dictionaries(
            scalars(key_field, pools), field_values(value_field, pools, depth - 1), max_size=4
        )
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        element = messages(field.message_type, pools, depth - 1)
    else:
        element = scalars(field, pools)
    return st.lists(element, max_size=4) if _is_repeated(field) else element


def assign(target: Message, field: FieldDescriptor, value) -> None:
    """Set ``field`` of ``target`` to ``value`` (as ``field_values`` draws it)."""
    name = field.name
    if _is_map(field):
        mapping = getattr(target, name)
        mapping.clear()
        if field.message_type.fields_by_name["value"].type == FieldDescriptor.TYPE_MESSAGE:
            for key, item in value.items():
                mapping[key].CopyFrom(item)
        else:
            mapping.update(value)
    elif _is_repeated(field):
        target.ClearField(name)
        getattr(target, name).extend(value)
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        getattr(target, name).CopyFrom(value)
    else:
        setattr(target, name, value)


def _choice_fields(descriptor: Descriptor) -> list[list[FieldDescriptor]]:
    """Fields grouped so that each group sets at most one: a real oneof is one group,
    every other field (proto3 ``optional`` included) a group of its own."""
    groups: list[list[FieldDescriptor]] = []
    seen_oneofs: set[str] = set()
    for field in descriptor.fields:
        oneof = field.containing_oneof
        if oneof is not None and len(oneof.fields) > 1:
            if oneof.full_name not in seen_oneofs:
                seen_oneofs.add(oneof.full_name)
                groups.append(list(oneof.fields))
        else:
            groups.append([field])
    return groups


def messages(descriptor: Descriptor, pools: Pools, depth: int = 3) -> st.SearchStrategy[Message]:
    """Structurally valid messages of ``descriptor`` with random fields set (nested
    messages to ``depth``; deeper ones are left unset)."""

    @st.composite
    def build(draw) -> Message:
        built = message_class(descriptor)()
        for group in _choice_fields(descriptor):
            choices = [f for f in group if depth > 0 or f.type != FieldDescriptor.TYPE_MESSAGE]
            if not choices or not draw(st.booleans()):
                continue
            field = draw(st.sampled_from(choices))
            assign(built, field, draw(field_values(field, pools, depth)))
        return built

    return build()


def _field_slots(message: Message, depth: int = 4) -> list[tuple[Message, FieldDescriptor]]:
    """Every (message, field) a mutation can change: all fields of the message and of
    every nested message that is set."""
    slots = [(message, field) for field in message.DESCRIPTOR.fields]
    if depth == 0:
        return slots
    for field, value in message.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE or _is_map(field):
            continue
        for nested in value if _is_repeated(field) else [value]:
            slots.extend(_field_slots(nested, depth - 1))
    return slots


def mutations(valid: Message, pools: Pools) -> st.SearchStrategy[Message]:
    """``valid`` with one field (anywhere in it) cleared or replaced by a drawn value."""

    @st.composite
    def mutate(draw) -> Message:
        copy = type(valid)()
        copy.CopyFrom(valid)
        slots = _field_slots(copy)
        if not slots:  # a message without fields: nothing to change
            return copy
        target, field = slots[draw(st.integers(0, len(slots) - 1))]
        if draw(st.integers(0, 4)) == 0:
            target.ClearField(field.name)
        else:
            assign(target, field, draw(field_values(field, pools, 2)))
        return copy

    return mutate()


def metadata(pools: Pools) -> st.SearchStrategy[tuple[tuple[str, str], ...]]:
    """Request headers gRPC lets through but a node must not trust: garbage in the
    headers RocketMQ clients send, unknown keys, values past the header size limit."""
    printable = st.text(alphabet=[chr(c) for c in range(0x20, 0x7F)], max_size=64)
    values = st.one_of(
        printable,
        st.sampled_from(
            [
                "",
                "20251301T250000Z",
                "Basic",
                "MQv2-HMAC-SHA1 Credential=",
                "0" * 9000,
                "x" * 20_000,
            ]
        ),
        st.sampled_from(pools.names),
    )
    keys = st.one_of(
        st.sampled_from(METADATA_KEYS),
        st.text(alphabet=string.ascii_lowercase + string.digits + "-_.", min_size=1, max_size=16)
        .filter(lambda key: key not in TRANSPORT_HEADERS and not key.startswith("grpc-"))
        .filter(lambda key: not key.endswith("-bin")),
    )
    return st.lists(st.tuples(keys, values), max_size=4).map(tuple)
