"""Routing format 2: the Raft log's commands and the snapshots as protobuf
(``proto/ferrymq/routing.proto``), not as pickled Python objects.

Why: a pickle names classes and fields by their Python names, so renaming one breaks every
log and snapshot written before, and what an older release would make of a newer pickle
cannot be reasoned about. A schema with field numbers can be: a reader skips fields it
does not know, and a field it lacks takes the dataclass's default.

Each dataclass maps to the message of the same name, field by field by name (``to_message``
and ``from_message``); Python types map as: ``str``/``int``/``bool``/``bytes`` to the
scalar, an ``Enum`` to its value (a string), ``X | None`` to an ``optional`` field,
``frozenset[str]``/``tuple[str, ...]`` to a repeated string (a frozenset sorted, so that
every replica writes the same bytes), ``tuple[tuple[str, int], ...]`` to a repeated pair
message, a dataclass to its message. ``tests/routing/test_encoding.py`` holds every
dataclass and its message to the same fields.

Format 1 (pickle) stays readable: a log or snapshot of 0.1.0 holds it, and a cluster
writes it until ``SetRoutingFormat(2)`` is applied (``routing/formats.py``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
import types
import typing
from typing import Any

from ferrymq.protocol.ferrymq import routing_pb2 as pb
from routing import commands
from routing.acl import User
from routing.commands import CommandResult, Tracked
from routing.formats import PICKLED, PROTOBUF
from routing.metadata import BrokerGroup, GroupConfig, Member, TopicRoute

READABLE_FORMATS = (PICKLED, PROTOBUF)

COMMAND_TYPES: tuple[type, ...] = typing.get_args(commands.Command)
RECORD_TYPES: tuple[type, ...] = (TopicRoute, GroupConfig, Member, BrokerGroup, User)


class UnreadableRoutingData(ValueError):
    """Bytes that are not a routing entry or snapshot of a format this code reads."""


def oneof_name(cls: type) -> str:
    """``RegisterNode`` -> ``register_node``: a class's field in a ``oneof``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()


COMMAND_FIELDS = {oneof_name(cls): cls for cls in COMMAND_TYPES}
RECORD_FIELDS = {oneof_name(cls): cls for cls in RECORD_TYPES}


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _optional_of(hint: Any) -> Any | None:
    """``X`` for a hint ``X | None``, None for any other hint."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(hint)) == 2:
            return args[0]
    return None


def to_message(record: Any, message: Any) -> Any:
    """Fill ``message`` from the dataclass ``record``; returns ``message``."""
    for field in dataclasses.fields(record):
        _put(message, field.name, getattr(record, field.name))
    return message


def _put(message: Any, name: str, value: Any) -> None:
    if value is None:
        return  # an optional field left unset
    if isinstance(value, enum.Enum):
        setattr(message, name, value.value)
    elif isinstance(value, bool | int | str | bytes):
        setattr(message, name, value)
    elif dataclasses.is_dataclass(value):
        to_message(value, getattr(message, name))
    elif isinstance(value, frozenset):
        getattr(message, name).extend(sorted(value))
    elif isinstance(value, tuple):
        repeated = getattr(message, name)
        for item in value:
            if isinstance(item, str):
                repeated.append(item)
            elif dataclasses.is_dataclass(item):
                to_message(item, repeated.add())
            else:  # a pair
                entry = repeated.add()
                first, second = entry.DESCRIPTOR.fields[:2]
                setattr(entry, first.name, item[0])
                setattr(entry, second.name, item[1])
    else:
        raise TypeError(f"{type(value).__name__} has no routing encoding ({name})")


def from_message(cls: type, message: Any) -> Any:
    """The dataclass ``cls`` read from ``message``."""
    values = {}
    fields = message.DESCRIPTOR.fields_by_name
    for name, hint in field_types(cls).items():
        inner = _optional_of(hint)
        if inner is not None:
            if not message.HasField(name):
                values[name] = None
                continue
            hint = inner
        elif has_scalar_presence(fields[name]) and not message.HasField(name):
            continue  # an ``optional`` field added later, written before it: the default
        values[name] = _take(hint, getattr(message, name), name)
    return cls(**values)


def has_scalar_presence(field: Any) -> bool:
    """A scalar field that knows whether it was written (``optional`` in proto3)."""
    return field.has_presence and field.message_type is None


def _take(hint: Any, value: Any, name: str) -> Any:
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise UnreadableRoutingData(f"{name}: {value!r} is not a {hint.__name__}") from None
    if hint in (str, int, bool, bytes):
        return hint(value)
    if dataclasses.is_dataclass(hint):
        return from_message(hint, value)
    if origin is frozenset:
        return frozenset(value)
    if origin is tuple:
        item = typing.get_args(hint)[0]
        if item is str:
            return tuple(value)
        if dataclasses.is_dataclass(item):
            return tuple(from_message(item, v) for v in value)
        first, second = typing.get_args(item)
        pairs = []
        for entry in value:
            a, b = entry.DESCRIPTOR.fields[:2]
            pairs.append((first(getattr(entry, a.name)), second(getattr(entry, b.name))))
        return tuple(pairs)
    raise TypeError(f"{hint} has no routing encoding ({name})")


# ---- Raft log entries --------------------------------------------------------------------
def encode_entry(command: object) -> bytes:
    """A command (plain, or ``Tracked``) as a format-2 log entry."""
    entry = pb.Entry(routing_format=PROTOBUF)
    if isinstance(command, Tracked):
        entry.request_id = command.request_id
        command = command.command
    if type(command) not in COMMAND_TYPES:
        raise TypeError(f"not a routing command: {type(command).__name__}")
    chosen = getattr(entry.command, oneof_name(type(command)))
    chosen.SetInParent()  # a command without fields (CatchUp) is still the one chosen
    to_message(command, chosen)
    return entry.SerializeToString(deterministic=True)


def decode_entry(data: bytes) -> object:
    """The command of a format-2 log entry (``Tracked`` when it carries a request id)."""
    try:
        entry = pb.Entry.FromString(data)
    except Exception as error:  # protobuf's DecodeError and friends
        raise UnreadableRoutingData(f"not a routing log entry: {error}") from None
    if entry.routing_format != PROTOBUF:
        raise UnreadableRoutingData(f"a log entry of routing format {entry.routing_format}")
    kind = entry.command.WhichOneof("kind")
    if kind is None:
        raise UnreadableRoutingData("a log entry without a command this code knows")
    command = from_message(COMMAND_FIELDS[kind], getattr(entry.command, kind))
    return Tracked(entry.request_id, command) if entry.request_id else command


# ---- snapshots ---------------------------------------------------------------------------
def _result_message(result: CommandResult, message: pb.CommandResult) -> None:
    message.ok, message.reason, message.detail = result.ok, result.reason, result.detail
    if result.value is not None:
        to_message(result.value, getattr(message.value, oneof_name(type(result.value))))


def _result_of(message: pb.CommandResult) -> CommandResult:
    kind = message.value.WhichOneof("kind")
    value = (
        None if kind is None else from_message(RECORD_FIELDS[kind], getattr(message.value, kind))
    )
    return CommandResult(message.ok, message.reason, message.detail, value)


# The state's tables: each one's record and the field that keys it.
TABLES: dict[str, tuple[type, str]] = {
    "topics": (TopicRoute, "name"),
    "groups": (GroupConfig, "name"),
    "broker_groups": (BrokerGroup, "name"),
    "members": (Member, "node_id"),
    "users": (User, "access_key"),
}


def encode_state(state: Any) -> bytes:
    """A ``RoutingState`` as a format-2 snapshot."""
    message = pb.State(
        routing_format=state.routing_format,
        applied=state.applied,
        awaits_finalize=state.awaits_finalize,
    )
    for table in TABLES:
        repeated = getattr(message, table)
        for record in getattr(state, table).values():
            to_message(record, repeated.add())
    for request_id, result in state.outcomes.items():
        outcome = message.outcomes.add(request_id=request_id)
        _result_message(result, outcome.result)
    return message.SerializeToString(deterministic=True)


def decode_state(data: bytes, state: Any) -> Any:
    """Fill the empty ``RoutingState`` ``state`` from a format-2 snapshot; returns it."""
    try:
        message = pb.State.FromString(data)
    except Exception as error:
        raise UnreadableRoutingData(f"not a routing snapshot: {error}") from None
    if message.routing_format not in READABLE_FORMATS:
        raise UnreadableRoutingData(f"a snapshot of routing format {message.routing_format}")
    for table, (record, key) in TABLES.items():
        rows = (from_message(record, m) for m in getattr(message, table))
        setattr(state, table, {getattr(row, key): row for row in rows})
    state.applied = message.applied
    state.routing_format = message.routing_format
    state.awaits_finalize = message.awaits_finalize
    state.outcomes = {o.request_id: _result_of(o.result) for o in message.outcomes}
    return state
