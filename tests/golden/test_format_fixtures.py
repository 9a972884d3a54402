"""Every golden file of a format (``tests/golden/formats/``, ``tests/support/format_samples.py``)
reads back as what was written, and the newest file of each format is what the code
writes today: a format changed without a new version fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferrymq.launcher.cluster import ClusterError
from ferrymq.protocol.ferrymq import routing_pb2 as pb
from ha import wire
from ha.link_auth import FrameMac, Role
from node.receipt_handle import ReceiptHandles
from routing import encoding
from routing.formats import PROTOBUF
from routing.raft_files import TermFile, TermRecord
from routing.state import RoutingState
from store.checkpoint import Checkpoint
from tests.support import format_samples as samples

FORMATS = Path(__file__).resolve().parent / "formats"


def golden(name: str) -> bytes:
    return (FORMATS / name).read_bytes()


@pytest.mark.parametrize("each", samples.FORMATS, ids=lambda f: f.file)
def test_the_code_writes_the_newest_golden_file_byte_for_byte(each):
    assert each.write() == golden(each.file), (
        f"{each.file} changed: give the format a new version and a new golden file "
        "(python -m tests.support.format_samples DIR), and keep reading the old one"
    )


def test_routing_entries_v2_read_as_the_commands_written():
    data, at, read = golden("routing-entries.v2.bin"), 0, []
    while at < len(data):
        (length,) = samples.ENTRY_LENGTH.unpack_from(data, at)
        at += samples.ENTRY_LENGTH.size
        read.append(encoding.decode_entry(data[at : at + length]))
        at += length
    assert tuple(read) == samples.COMMANDS


def test_a_routing_snapshot_v2_reads_as_the_state_it_was():
    state = encoding.decode_state(golden("routing-snapshot.v2.bin"), RoutingState())
    assert state.routing_format == PROTOBUF and state.applied == len(samples.COMMANDS)
    assert set(state.topics) == {"orders"} and state.topics["orders"].queues == (("g1", 6),)
    assert set(state.groups) == {"readers"} and state.groups["readers"].lite_exclusive
    readers = state.groups["readers"]
    assert (readers.max_delivery_attempts, readers.fifo) == (7, True)  # UpdateGroup kept fifo
    group = state.broker_groups["g1"]
    assert (group.master, group.epoch, group.in_sync) == ("n2", 2, frozenset({"n2"}))
    assert not state.members["n1"].alive and state.members["n1"].software_version == "0.2.0"
    user = state.users["app-user"]
    assert user.admin and user.sealed_secret == b"sealed-secret" and len(user.acl) == 1
    assert set(state.outcomes) == {b"request-2", b"request-3"}
    assert state.outcomes[b"request-3"].value.access_key == "app-user"


def test_a_raft_term_file_v1_reads_as_the_record_written(tmp_path):
    path = tmp_path / "journal.term"
    path.write_bytes(golden("raft-term.v1.bin"))
    assert TermFile(str(path), TermRecord()).record == samples.TERM


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_a_checkpoint_reads_as_the_offsets_written(tmp_path, version):
    path = tmp_path / "checkpoint"
    path.write_bytes(golden(f"checkpoint.{version}.bin"))
    assert Checkpoint.read(str(path)) == samples.CHECKPOINT


def test_a_receipt_handle_h2_verifies_under_its_key_topic_and_group():
    text = golden("receipt-handle.h2.txt").decode()
    handles = ReceiptHandles(samples.HANDLE_KEY)
    assert handles.decode(text, "orders", "readers") == samples.HANDLE


def test_replication_frames_p2_parse_and_verify():
    (challenge, data, ack) = samples.parse_frames(golden("replication.p2.bin"))
    assert challenge[0] == wire.Kind.CHALLENGE
    assert wire.json_object(wire.Kind.CHALLENGE, challenge[1])["version"] == 2
    kind, body = data
    header, records, tag = (
        body[: wire.DATA_HEADER.size],
        body[wire.DATA_HEADER.size : -16],
        body[-16:],
    )
    assert kind == wire.Kind.DATA and wire.DATA_HEADER.unpack(header) == (4096, 3, 1024, 4000)
    assert records == samples.RECORDS
    assert FrameMac(samples.LINK_KEY, Role.MASTER).verify(wire.Kind.DATA, header + records, tag)
    kind, body = ack
    assert kind == wire.Kind.ACK and wire.ACK.unpack(body[: wire.ACK.size]) == (4160,)
    assert FrameMac(samples.LINK_KEY, Role.SLAVE).verify(wire.Kind.ACK, body[:8], body[8:])


def test_a_cluster_file_v1_loads_as_the_plan_written():
    plan = samples.read_cluster_file(golden("cluster-file.v1.json"))
    expected = samples.cluster_plan(plan.directory)
    assert (plan.secret, plan.nodes[0].id, plan.settings) == (
        expected.secret,
        expected.nodes[0].id,
        expected.settings,
    )
    assert plan.nodes[0].remoting == "127.0.0.1:5"


def test_every_format_has_a_golden_file_and_a_reader_test():
    files = {f.file for f in samples.FORMATS} | set(samples.OLDER_VERSIONS)
    assert files == {p.name for p in FORMATS.iterdir()}
    assert pb.Entry.DESCRIPTOR.fields_by_name["routing_format"].number == 1


def test_a_cluster_file_of_a_newer_format_is_refused_naming_it():
    newer = golden("cluster-file.v1.json").replace(b'"format": 1', b'"format": 2')
    with pytest.raises(ClusterError, match="format 2, written by a newer ferrymq"):
        samples.read_cluster_file(newer)
