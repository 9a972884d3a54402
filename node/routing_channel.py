"""What a node's process and its routing host (``node/routing_host.py``) say to each other
over the socket pair that joins them: one length-prefixed pickle per message.

Pickle is safe here: both ends are the same node's processes, joined by a socket pair that
nothing else holds (the Raft traffic between nodes is encrypted by pysyncobj; this never
leaves the host).

Order is the contract: the host writes an ``Applied`` (or ``Restored``) before anything
that depends on it, so the node's copy of the state holds a command before the node hears
that command's ``Outcome`` (read-your-writes), and every command in Raft order.
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from dataclasses import dataclass

from node.heartbeat import HeartbeatTimes
from routing.commands import CommandResult, NodeHeartbeat
from routing.replica import RaftStatus

LENGTH = struct.Struct(">I")
MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a whole routing state, with room to spare


# ---- node -> routing host ---------------------------------------------------------------
@dataclass(frozen=True)
class Setup:
    """The first message: what the host needs to join routing for this node."""

    node_id: str
    self_address: str | None  # this node's Raft address, None for a read-only replica
    voters: list[str]
    secret: str
    data_dir: str
    lease_s: float
    heartbeat_interval_s: float
    unclean_election: bool
    join_timeout_s: float


@dataclass(frozen=True)
class Sample:
    """This node's heartbeat as of now, sent every ``SAMPLE_INTERVAL_S`` by the node's
    liveness loop: the proof that the node's process still runs, not only its host."""

    heartbeat: NodeHeartbeat
    sent_at: float  # the node's time.monotonic() (one clock for the host's processes)


@dataclass(frozen=True)
class Submit:
    request_id: int
    command: object
    timeout_s: float


@dataclass(frozen=True)
class CatchUpRequest:
    request_id: int
    timeout_s: float


@dataclass(frozen=True)
class Start:
    """Begin the heartbeats and the controller (the node serves)."""


@dataclass(frozen=True)
class RenewNow:
    """Heartbeat at once (a promotion, a refilled log): the ``Sample`` before it is fresh."""


@dataclass(frozen=True)
class HandLeadership:
    voter: str


# ---- routing host -> node ---------------------------------------------------------------
@dataclass(frozen=True)
class Applied:
    """One committed command as the host's replica applied it."""

    command: object
    result: CommandResult


@dataclass(frozen=True)
class Restored:
    """The replica's whole state replaced (a snapshot loaded or installed), pickled when
    it happened."""

    state: bytes


@dataclass(frozen=True)
class Outcome:
    """The answer to a ``Submit`` or ``CatchUpRequest``: ``result`` (None for a read
    barrier), or ``error`` (``unavailable``, ``unknown`` or ``too_large``) with
    ``detail``."""

    request_id: int
    result: CommandResult | None = None
    error: str = ""
    detail: str = ""


@dataclass(frozen=True)
class Status:
    """The replica's Raft view and the heartbeats' figures, sent every
    ``STATUS_INTERVAL_S`` (and once ready)."""

    ready: bool
    raft: RaftStatus
    is_leader: bool
    leads_with_quorum: bool
    heartbeat_times: HeartbeatTimes


@dataclass(frozen=True)
class Failed:
    """The host could not join routing: why (the node stops with it)."""

    detail: str


def frame(message: object) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    if len(body) > MAX_MESSAGE_BYTES:
        raise ValueError(f"{type(message).__name__} pickles to {len(body)} bytes")
    return LENGTH.pack(len(body)) + body


async def read_message(reader: asyncio.StreamReader) -> object:
    """The next message; ``asyncio.IncompleteReadError`` once the other end is gone."""
    (length,) = LENGTH.unpack(await reader.readexactly(LENGTH.size))
    if length > MAX_MESSAGE_BYTES:
        raise ValueError(f"a {length}-byte message on the routing channel")
    return pickle.loads(await reader.readexactly(length))
