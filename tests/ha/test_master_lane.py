"""The master's append and its DATA frames in one native call (``ha._replica_lane``'s
``append_and_push``, through ``ReplicationMaster.write_log``), against the Python path it
replaces (``CommitLog.append``'s encode and write, then ``_push`` per link): the same log,
byte for byte, and the same bytes on every link's socket, over real connections."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

from ferrymq.client.messages import Message as SdkMessage
from ferrymq.client.produce_records import encode_record
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ha import master as master_module
from ha.link_auth import MAC_BYTES, Handshake, Role, session_macs
from ha.link_stream import LinkStream
from ha.master import ReplicationMaster
from ha.wire import DATA_HEADER, FRAME_HEADER, Kind
from node.message_rules import produce_spans
from store.commitlog import PreparedRun, topic_prefix_of
from store.config import StoreConfig
from store.mapped_file import MappedFile
from store.message import Message
from store.message_store import MessageStore
from store.results import PutStatus
from tests.support.manual_clock import ManualClock
from tests.support.sync_master import master_of

SLAVES = ("s1", "s2")
BODIES = [b"a", b"b" * 1000, b"c" * 70_000, b"d" * 300_000]  # the last: over one chunk


def open_store(directory: str) -> MessageStore:
    return MessageStore.open(
        StoreConfig(
            data_dir=directory,
            commitlog_segment_bytes=8 << 20,
            consume_queue_entries_per_file=1_000,
            index_slot_count=1_009,
            index_entry_count=4_000,
        ),
        clock_ms=lambda: 1_700_000_000_000,
    )


def frames_end(stream: bytes | bytearray) -> int:
    """The log offset the whole DATA frames at the start of ``stream`` reach (0: none)."""
    end, at = 0, 0
    while len(stream) - at >= FRAME_HEADER.size:
        _, length = FRAME_HEADER.unpack_from(stream, at)
        if len(stream) - at - FRAME_HEADER.size < length:
            break
        offset = DATA_HEADER.unpack_from(stream, at + FRAME_HEADER.size)[0]
        end = offset + length - DATA_HEADER.size - MAC_BYTES
        at += FRAME_HEADER.size + length
    return end


def frame_offsets(stream: bytes) -> list[int]:
    """The log offset each DATA frame of ``stream`` starts at."""
    offsets, at = [], 0
    while at < len(stream):
        kind, length = FRAME_HEADER.unpack_from(stream, at)
        assert kind == Kind.DATA
        offsets.append(DATA_HEADER.unpack_from(stream, at + FRAME_HEADER.size)[0])
        at += FRAME_HEADER.size + length
    return offsets


class Peer(asyncio.Protocol):
    """The slave's end of a link: keeps what arrives, reads only while ``reading``."""

    def __init__(self) -> None:
        self.received = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received += data


class Group:
    """A SYNC master over a real store whose two links stream into real sockets."""

    def __init__(self, directory: str, *, native: bool, small_buffers: bool = False) -> None:
        self.small_buffers = small_buffers  # sockets that take a frame only in part
        self.store = open_store(directory)
        self.master: ReplicationMaster = master_of(self.store, ManualClock(), min_insync=3)
        if not native:
            self.store.set_log_writer(None)
        self.peers: dict[str, Peer] = {}
        self.links = {}
        self.streams: list[LinkStream] = []
        self.servers: list[asyncio.Server] = []

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        self.master.activate(frozenset({"m", *SLAVES}))
        start = self.store.write_offset
        for slave in SLAVES:
            peer = Peer()
            listening = socket.create_server(("127.0.0.1", 0))
            if self.small_buffers:  # inherited by the accepted socket
                listening.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
            server = await loop.create_server(lambda peer=peer: peer, sock=listening)
            self.servers.append(server)
            port = server.sockets[0].getsockname()[1]
            _, stream = await loop.create_connection(LinkStream, "127.0.0.1", port)
            if self.small_buffers:
                raw = stream.transport.get_extra_info("socket")
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
            self.streams.append(stream)
            link = self.master.open_link(slave, start, start)
            handshake = Handshake("group-1", slave, "n" * 32, "o" * 32)  # the same keys
            link.writer = stream
            link.mac, link.sent = session_macs("secret", handshake, Role.MASTER).outgoing, start
            self.peers[slave], self.links[slave] = peer, link

    async def received(self, end: int, slaves: tuple[str, ...] = SLAVES) -> dict[str, bytes]:
        """What each slave's end holds once the frames of ``slaves`` reach log offset
        ``end`` whole."""
        for _ in range(5_000):
            if all(frames_end(self.peers[slave].received) >= end for slave in slaves):
                break
            await asyncio.sleep(0.001)
        return {slave: bytes(peer.received) for slave, peer in self.peers.items()}

    def log(self) -> bytes:
        return self.store.commitlog.read_records(0, self.store.write_offset)

    async def close(self) -> None:
        for stream in self.streams:
            stream.transport.close()
        for server in self.servers:
            server.close()
        self.store.shutdown()


def records_of(bodies: list[bytes]) -> bytes:
    """The SDK's produce records of ``bodies`` (each with its own message id)."""
    return b"".join(
        encode_record(SdkMessage("orders", body, tag="t"), pb.NORMAL, 1_700_000_000_000)
        for body in bodies
    )


# Made once: both groups of a comparison put the same records, message ids included.
RUN_RECORDS = [records_of([b"r1", b"r2" * 500]), records_of([b"r3"])]


def run_of(records: bytes, count: int, queue_id: int = 1) -> PreparedRun:
    """A produce run as the produce lane makes it from the SDK's records."""
    spans = produce_spans(records, count, 4 << 20, str(pb.NORMAL))
    assert spans is not None
    prefix = topic_prefix_of(b"orders")
    return PreparedRun.of("orders", prefix, queue_id, b"\x01" * 8, memoryview(records), spans)


async def append_now(store: MessageStore, run: PreparedRun):
    """``append_now`` as the lane calls it: as a turn of the loop's first put."""
    for _ in range(10):
        await asyncio.sleep(0)
        result = store.append_now([run])
        if result is not None:
            return result
    raise AssertionError("no turn of the loop was free for the put")


async def drained(group: Group) -> None:
    """Until no link's transport holds bytes: each append then finds its links as the
    last one left them, and both paths cut the same frames."""
    for _ in range(5_000):
        if not any(s.transport.get_write_buffer_size() for s in group.streams):
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the links' transports did not drain")


async def put_all(group: Group) -> list:
    """Messages one at a time and in batches, and produce runs, as the put paths make them."""
    results = []
    for body in BODIES:
        results.append(await group.store.put_messages_async([Message("orders", body)]))
        await drained(group)
    results.append(
        await group.store.put_messages_async([Message("orders", b"x" * i) for i in range(1, 40)])
    )
    await drained(group)
    results.append(await append_now(group.store, run_of(RUN_RECORDS[0], 2)))
    await drained(group)
    results.append(await append_now(group.store, run_of(RUN_RECORDS[1], 1, queue_id=2)))
    return results


def test_the_native_append_writes_the_log_and_the_frames_the_python_path_writes(tmp_path):
    async def run() -> tuple:
        found = []
        for native in (True, False):
            group = Group(str(tmp_path / f"native-{native}"), native=native)
            try:
                await group.connect()
                results = await put_all(group)
                assert [r is not None and r.ok for r in results] == [True] * len(results), results
                frames = await group.received(group.store.write_offset)
                sent = {s: (link.sent, link.mac.sequence) for s, link in group.links.items()}
                found.append(([r.appended for r in results], group.log(), frames, sent))
            finally:
                await group.close()
        return found

    native, python = asyncio.run(run())
    assert native[0] == python[0]  # the same queue and log offsets
    assert native[1] == python[1]  # the same log, byte for byte
    assert native[2] == python[2]  # the same frames on each link
    assert native[3] == python[3]  # each link as far, its MAC at the same frame
    frames = native[2]["s1"]
    assert frames[0] == Kind.DATA and len(frames) > len(native[1])


def test_a_frame_its_socket_takes_in_part_arrives_whole_and_in_order(tmp_path):
    """A slave that does not read: the socket takes part of a frame, the link's transport
    the rest, and the frames after it (which find bytes buffered) go through ``_push``."""

    async def run() -> None:
        group = Group(str(tmp_path / "slow"), native=True, small_buffers=True)
        twin = Group(str(tmp_path / "twin"), native=False, small_buffers=True)
        try:
            await group.connect()
            await twin.connect()
            for g in (group, twin):
                g.peers["s2"].transport.pause_reading()
            for body in [b"y" * 100_000] * 4:
                for g in (group, twin):
                    assert (await g.store.put_messages_async([Message("orders", body)])).ok
            assert group.links["s2"].writer.transport.get_write_buffer_size() > 0
            for g in (group, twin):
                g.peers["s2"].transport.resume_reading()
            frames = await group.received(group.store.write_offset)
            expected = await twin.received(twin.store.write_offset)
            assert frames == expected
            assert group.log() == twin.log()
        finally:
            await group.close()
            await twin.close()

    asyncio.run(run())


def test_a_write_the_disk_refuses_leaves_nothing_and_sends_nothing(tmp_path, monkeypatch):
    async def run() -> None:
        group = Group(str(tmp_path / "full"), native=True)
        try:
            await group.connect()
            assert (await group.store.put_messages_async([Message("orders", b"before")])).ok
            end = group.store.write_offset
            full = os.open("/dev/full", os.O_WRONLY)
            try:
                monkeypatch.setattr(MappedFile, "writer_fd", lambda self: full)
                refused = await group.store.put_messages_async([Message("orders", b"lost")])
            finally:
                monkeypatch.undo()
                os.close(full)
            assert refused.status is PutStatus.DISK_FULL
            assert group.store.write_offset == end
            assert all(link.sent == end for link in group.links.values())
            after = await group.store.put_messages_async([Message("orders", b"after")])
            assert after.ok and after.appended[0].queue_offset == 1  # the offset given back
            assert after.appended[0].physical_offset == end
            received = await group.received(group.store.write_offset)
            for stream in received.values():  # no frame of the refused put between them
                assert frame_offsets(stream) == [0, end]
        finally:
            await group.close()

    asyncio.run(run())


@pytest.mark.parametrize("state", ["not streaming", "behind", "closed"])
def test_a_link_the_native_call_cannot_take_is_pushed_by_python(tmp_path, state):
    """A link with no writer, one that has not sent all before the append, and one whose
    connection closed: the native call passes each by and the Python path does with it
    what it did before (``_push`` from where it stands, or nothing)."""

    async def run() -> None:
        groups = [Group(str(tmp_path / f"{state}-{n}"), native=n) for n in (True, False)]
        try:
            for g in groups:
                await g.connect()
                link = g.links["s2"]
                if state == "not streaming":
                    link.writer = None
                elif state == "behind":  # an append it did not see: sent stays behind
                    writer, link.writer = link.writer, None
                    assert (await g.store.put_messages_async([Message("orders", b"a")])).ok
                    link.writer = writer
                else:
                    link.writer.transport.close()
            for body in BODIES[:3]:
                for g in groups:
                    assert (await g.store.put_messages_async([Message("orders", body)])).ok
            native, python = groups
            assert native.log() == python.log()
            assert native.links["s2"].sent == python.links["s2"].sent
            slaves = ("s1",) if state != "behind" else SLAVES  # s2 gets nothing more
            assert await native.received(native.store.write_offset, slaves) == (
                await python.received(python.store.write_offset, slaves)
            )
        finally:
            for g in groups:
                await g.close()

    asyncio.run(run())


def test_links_past_the_native_calls_bound_are_pushed_by_python(tmp_path, monkeypatch):
    """A group with more caught-up links than one native call sends to: the first ones get
    their frame from it, the others from ``_push``, and each gets the same bytes."""
    monkeypatch.setattr(master_module, "NATIVE_LINKS_MAX", 1)
    native_call = master_module.native.append_and_push
    links_sent_to: list[int] = []

    def counted(*arguments):
        links_sent_to.append(len(arguments[10]))  # the (socket, gmac, sequence) of each
        return native_call(*arguments)

    monkeypatch.setattr(master_module.native, "append_and_push", counted)

    async def run() -> None:
        groups = [Group(str(tmp_path / f"bound-{n}"), native=n) for n in (True, False)]
        try:
            for g in groups:
                await g.connect()
            for body in BODIES[:3]:
                for g in groups:
                    assert (await g.store.put_messages_async([Message("orders", body)])).ok
                    await drained(g)
            native, python = groups
            assert native.log() == python.log()
            assert await native.received(native.store.write_offset) == (
                await python.received(python.store.write_offset)
            )
        finally:
            for g in groups:
                await g.close()

    asyncio.run(run())
    assert links_sent_to and set(links_sent_to) == {1}
