"""Golden files of every persisted and wire format, each named by its format's version
(``tests/golden/formats/``), and what reading one must give.

A format that changes gets a new version and a new file; the old files stay, and
``tests/golden/test_format_fixtures.py`` holds every release to reading them, while the
newest file of each format must equal what the code writes today (a format that changed
without a new version fails). ``python -m tests.support.format_samples DIR`` writes today's
files.

The data directory a release wrote as a whole (CommitLog, consume queues, index, Raft
journal) is covered by ``tests/golden/<release>/`` and ``tests/golden/test_golden_formats.py``.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ferrymq.launcher.cluster import ClusterPlan, NodePlan, load_plan, save_plan
from ha import wire
from ha.link_auth import FrameMac, Role
from node.receipt_handle import ReceiptHandle, ReceiptHandles
from routing import encoding
from routing.acl import AclEntry, Action, Effect, ResourceKind
from routing.commands import (
    AlterInSync,
    CatchUp,
    CreateGroup,
    CreateTopic,
    CreateUser,
    DeleteGroup,
    DeleteTopic,
    DeleteUser,
    ElectMaster,
    GrantAcl,
    MarkNodeDown,
    NodeHeartbeat,
    RegisterNode,
    ReportMasterFound,
    ReportMasterLost,
    RevokeAcl,
    SetRoutingFormat,
    Tracked,
    UpdateGroup,
    UpdateTopic,
    UpdateUser,
)
from routing.metadata import MessageType, Permission
from routing.raft_files import TermFile, TermRecord
from routing.state import RoutingState
from store.checkpoint import Checkpoint

ENTRY_LENGTH = struct.Struct(">I")
RULE = AclEntry(Effect.ALLOW, Action.PUBLISH, ResourceKind.TOPIC, "orders-*")
# One of every routing command, in an order a state applies them all successfully.
COMMANDS: tuple[object, ...] = (
    RegisterNode(
        "n1",
        "g1",
        "127.0.0.1:1",
        "127.0.0.1:2",
        "127.0.0.1:3",
        10,
        1000,
        3000,
        False,
        "127.0.0.1:4",
        "127.0.0.1:5",
        "0.2.0",
        2,
    ),
    Tracked(b"request-2", RegisterNode("n2", "g1", "127.0.0.1:6", routing_format=2)),
    NodeHeartbeat("n2", 77, 2000),
    AlterInSync("g1", "n1", 1, frozenset({"n1", "n2"}), 1),
    ReportMasterLost("g1", "n2", 1, 70),
    ReportMasterFound("g1", "n2", 1),
    ElectMaster("g1", "n2", 1, "planned", unclean=False),
    MarkNodeDown("n1", 1),
    CatchUp(),
    CreateTopic("orders", 4, ("g1",), MessageType.FIFO, Permission.READ, -1),
    UpdateTopic("orders", 6, (), Permission.READ_WRITE, None),
    CreateTopic("gone", 1),
    DeleteTopic("gone"),
    CreateGroup("readers", 5, fifo=True, on_first_use=False, lite_exclusive=True),
    UpdateGroup("readers", max_delivery_attempts=7, fifo=None, lite_exclusive=True),
    CreateGroup("gone", 16),
    DeleteGroup("gone"),
    Tracked(b"request-3", CreateUser("app-user", b"sealed-secret", admin=False)),
    UpdateUser("app-user", b"", admin=True),
    GrantAcl("app-user", RULE),
    GrantAcl("app-user", AclEntry(Effect.DENY, Action.SUBSCRIBE, ResourceKind.GROUP, "g*")),
    RevokeAcl("app-user", RULE),
    CreateUser("gone-user", b"x"),
    DeleteUser("gone-user"),
    SetRoutingFormat(2),
)
HANDLE_KEY = bytes(range(32))
HANDLE = ReceiptHandle(3, 123456789, "00ff00ff00ff00ff")
LINK_KEY = bytes(range(16))
TERM = TermRecord(term=7, voted_for="127.0.0.1:9", commit_index=42)
CHECKPOINT = Checkpoint(4096, 2048, 1024, 1_700_000_000_001, 1_700_000_000_002, 3)
RECORDS = b"\x00" * 64  # a DATA frame carries whole records; the frame does not read them


def routing_state() -> RoutingState:
    state = RoutingState()
    for command in COMMANDS:
        assert state.apply(command).ok, command
    return state


def cluster_plan(directory: str) -> ClusterPlan:
    node = NodePlan(
        "node-1",
        "group-1",
        True,
        "127.0.0.1:1",
        "127.0.0.1:2",
        "127.0.0.1:3",
        "127.0.0.1:4",
        "node-1",
        0,
        "",
        "127.0.0.1:5",
    )
    return ClusterPlan(directory, "cluster-secret", (node,), {"store": {"flush": "SYNC_FLUSH"}})


# ---- writers: today's bytes of each format -----------------------------------------------
def _in_file(write: Callable[[str], None]) -> bytes:
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "file")
        write(path)
        return Path(path).read_bytes()


def routing_entries() -> bytes:
    entries = (encoding.encode_entry(command) for command in COMMANDS)
    return b"".join(ENTRY_LENGTH.pack(len(e)) + e for e in entries)


def replication_frames() -> bytes:
    master = FrameMac(LINK_KEY, Role.MASTER)
    slave = FrameMac(LINK_KEY, Role.SLAVE)
    return b"".join(
        (
            wire.control(
                wire.Kind.CHALLENGE, version=wire.PROTOCOL_VERSION, nonce="00", group="g1"
            ),
            wire.data_frame(master, 4096, 3, 1024, 4000, RECORDS),
            wire.ack_frame(slave, 4160),
        )
    )


def cluster_file() -> bytes:
    with tempfile.TemporaryDirectory() as directory:
        save_plan(cluster_plan(directory))
        return Path(directory, "cluster.json").read_bytes()


@dataclass(frozen=True)
class Format:
    file: str  # under tests/golden/formats/, named by the format's version
    write: Callable[[], bytes]


FORMATS: tuple[Format, ...] = (
    Format("routing-entries.v2.bin", routing_entries),
    Format("routing-snapshot.v2.bin", lambda: encoding.encode_state(routing_state())),
    Format("raft-term.v1.bin", lambda: _in_file(lambda p: TermFile(p, TERM).close())),
    Format("checkpoint.v2.bin", lambda: _in_file(CHECKPOINT.write)),
    Format(
        "receipt-handle.h2.txt",
        lambda: ReceiptHandles(HANDLE_KEY).encode(HANDLE, "orders", "readers").encode(),
    ),
    Format("replication.p2.bin", replication_frames),
    Format("cluster-file.v1.json", cluster_file),
)

# Golden files of versions the code reads but no longer writes (never rewritten).
OLDER_VERSIONS: tuple[str, ...] = ("checkpoint.v1.bin",)


def write_all(directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    for each in FORMATS:
        Path(directory, each.file).write_bytes(each.write())


def read_cluster_file(data: bytes) -> ClusterPlan | None:
    with tempfile.TemporaryDirectory() as directory:
        Path(directory, "cluster.json").write_bytes(data)
        return load_plan(directory)


def parse_frames(data: bytes) -> list[tuple[int, bytes]]:
    """(kind, body) of each frame of a stream of replication frames."""
    frames, at = [], 0
    while at < len(data):
        kind, length = wire.FRAME_HEADER.unpack_from(data, at)
        at += wire.FRAME_HEADER.size
        frames.append((kind, data[at : at + length]))
        at += length
    return frames


if __name__ == "__main__":
    write_all(sys.argv[1])
    print(json.dumps([f.file for f in FORMATS]))
