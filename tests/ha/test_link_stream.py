"""The link stream (``ha/link_stream.py``): every byte once and in order, however the
reads cut the stream and whatever size the frames are, read or delivered as it arrives
(``deliver_to``, the master's ACKs: ``take_sealed`` reads frames as ``read_sealed`` does);
the end of the link as asyncio's streams report it; flow control both ways; and real
sockets on both loops."""

from __future__ import annotations

import asyncio
import itertools
import struct

import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from ha.link_auth import Handshake, Role, session_macs
from ha.link_stream import STAGED_BYTES, LinkStream, open_link
from ha.wire import (
    DATA_HEADER,
    ForgedFrame,
    Kind,
    LinkError,
    data_frame,
    read_exactly,
    read_sealed,
    read_sealed_control,
    sealed,
    sealed_control,
    take_sealed,
)

HEADER = struct.Struct(">I")


class FakeTransport(asyncio.Transport):
    """Records what the stream asks of its transport."""

    def __init__(self) -> None:
        super().__init__()
        self.paused = False
        self.closed = False
        self.written: list[bytes] = []

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return self.closed

    def write(self, data) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_extra_info(self, name, default=None):
        return default

    def get_write_buffer_size(self) -> int:
        return 0


def framed(bodies: list[bytes]) -> bytes:
    return b"".join(HEADER.pack(len(body)) + body for body in bodies)


def arrive(stream: LinkStream, data: bytes) -> int:
    """One read of the loop: as much of ``data`` as the buffer the stream gives holds."""
    buffer = stream.get_buffer(-1)
    assert len(buffer) > 0, "the stream gave an empty buffer"
    size = min(len(buffer), len(data))
    buffer[:size] = data[:size]
    del buffer
    stream.buffer_updated(size)
    return size


async def feed(stream: LinkStream, transport: FakeTransport, data: bytes, cuts: list[int]):
    """Deliver ``data`` as the event loop would: reads of at most each cut's size into the
    buffer the stream gives, never while it paused reading, one loop turn between reads."""
    position, turn = 0, 0
    while position < len(data):
        while transport.paused:
            await asyncio.sleep(0)
        position += arrive(stream, data[position : position + cuts[turn % len(cuts)]])
        turn += 1
        await asyncio.sleep(0)


async def read_frames(stream: LinkStream, count: int) -> list[bytes]:
    bodies = []
    for _ in range(count):
        (length,) = HEADER.unpack(await stream.readexactly(HEADER.size))
        bodies.append(bytes(await stream.readexactly(length)) if length else b"")
    return bodies


sizes = st.one_of(
    st.integers(0, 64),
    st.integers(STAGED_BYTES - 8, STAGED_BYTES + 8),
    st.integers(0, 3 * STAGED_BYTES),
)


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(sizes, min_size=1, max_size=8),
    cuts=st.lists(st.integers(1, 3 * STAGED_BYTES), min_size=1, max_size=6),
    seed=st.integers(0, 255),
)
def test_frames_come_out_whole_and_in_order_however_the_reads_cut_them(lengths, cuts, seed):
    bodies = [bytes((seed + i + j) % 251 for j in range(n)) for i, n in enumerate(lengths)]

    async def run() -> list[bytes]:
        stream, transport = LinkStream(), FakeTransport()
        stream.connection_made(transport)
        feeding = asyncio.ensure_future(feed(stream, transport, framed(bodies), cuts))
        got = await read_frames(stream, len(bodies))
        await feeding
        return got

    assert asyncio.run(run()) == bodies


def test_a_large_read_is_the_buffer_the_bytes_were_read_into():
    async def run() -> None:
        stream, transport = LinkStream(), FakeTransport()
        stream.connection_made(transport)
        body = bytes(range(256)) * (STAGED_BYTES // 64)
        reading = asyncio.ensure_future(stream.readexactly(len(body)))
        await asyncio.sleep(0)
        buffer = stream.get_buffer(-1)
        assert len(buffer) == len(body)  # the frame's own buffer, exactly its size
        buffer[:] = body
        del buffer
        stream.buffer_updated(len(body))
        got = await reading
        assert isinstance(got, bytearray) and got == body
        assert len(stream.get_buffer(-1)) == STAGED_BYTES  # later reads go to staging

    asyncio.run(run())


def test_reading_pauses_when_the_staging_buffer_is_full_and_resumes_when_read():
    async def run() -> None:
        stream, transport = LinkStream(), FakeTransport()
        stream.connection_made(transport)
        buffer = stream.get_buffer(-1)
        buffer[:] = bytes(len(buffer))
        del buffer
        stream.buffer_updated(STAGED_BYTES)
        assert transport.paused
        await stream.readexactly(1)
        assert not transport.paused
        assert len(stream.get_buffer(-1)) == 1  # the unread bytes moved to the front

    asyncio.run(run())


@pytest.mark.parametrize("length", [8, 3 * STAGED_BYTES])
def test_the_peer_ending_the_link_mid_read_is_an_incomplete_read(length):
    async def run() -> None:
        stream, transport = LinkStream(), FakeTransport()
        stream.connection_made(transport)
        reading = asyncio.ensure_future(read_exactly(stream, length))
        await asyncio.sleep(0)
        buffer = stream.get_buffer(-1)
        buffer[:3] = b"abc"
        del buffer
        stream.buffer_updated(3)
        stream.eof_received()
        stream.connection_lost(None)
        with pytest.raises(LinkError, match="link closed"):
            await reading
        with pytest.raises(asyncio.IncompleteReadError):
            await stream.readexactly(1)

    asyncio.run(run())


def test_a_broken_link_is_a_connection_error_for_reads_and_drains():
    async def run() -> None:
        stream, transport = LinkStream(), FakeTransport()
        stream.connection_made(transport)
        reading = asyncio.ensure_future(stream.readexactly(4))
        stream.pause_writing()
        draining = asyncio.ensure_future(stream.drain())
        await asyncio.sleep(0)
        assert not draining.done()
        stream.connection_lost(ConnectionResetError("reset by peer"))
        with pytest.raises(ConnectionError, match="reset by peer"):
            await reading
        with pytest.raises(ConnectionError):
            await draining
        with pytest.raises(ConnectionError):
            await stream.drain()

    asyncio.run(run())


def test_drain_waits_while_the_transport_buffers_too_much():
    async def run() -> None:
        stream, transport = LinkStream(), FakeTransport()
        stream.connection_made(transport)
        await stream.drain()  # not paused: at once
        stream.pause_writing()
        draining = asyncio.ensure_future(stream.drain())
        await asyncio.sleep(0)
        assert not draining.done()
        stream.resume_writing()
        await asyncio.wait_for(draining, 5)
        stream.write(b"ack")
        assert transport.written == [b"ack"]
        stream.close()
        assert stream.is_closing()

    asyncio.run(run())


@pytest.mark.parametrize("loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop])
def test_frames_over_a_real_socket_on_either_loop(loop_factory):
    bodies = [b"", b"x" * 40, bytes(range(256)) * 4096, b"y" * (STAGED_BYTES + 1), b"z"]
    answers = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for body in bodies:  # in pieces, with pauses, as a busy master's writes arrive
            data = HEADER.pack(len(body)) + body
            for start in range(0, len(data), 50_000):
                writer.write(data[start : start + 50_000])
                await writer.drain()
                await asyncio.sleep(0)
        answers.append(await reader.readexactly(3))
        writer.close()

    async def run() -> list[bytes]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        stream = await open_link("127.0.0.1", port)
        got = await read_frames(stream, len(bodies))
        stream.write(b"ack")
        await stream.drain()
        with pytest.raises(asyncio.IncompleteReadError):
            await stream.readexactly(1)  # the server closed after reading the ack
        stream.close()
        server.close()
        await server.wait_closed()
        return got

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        assert runner.run(run()) == bodies
    assert answers == [b"ack"]


def test_sealed_frames_of_any_size_are_checked_and_read_whole():
    """``read_sealed`` reads a frame's body (payload and tag) in one read: a large body is
    the buffer the kernel filled and its payload a view of it, a control frame's JSON is
    read from either, and a frame altered on the way fails its MAC."""
    handshake = Handshake("group", "slave-1", "a" * 32, "b" * 32)
    master = session_macs("secret", handshake, Role.MASTER)
    slave = session_macs("secret", handshake, Role.SLAVE)
    epochs = [[epoch, epoch * 4096] for epoch in range(1, 2000)]  # JSON over 16 KiB
    records = bytes(range(256)) * (STAGED_BYTES // 128)
    frames = [
        sealed_control(master.outgoing, Kind.EPOCHS, epochs=epochs),
        sealed_control(master.outgoing, Kind.START, offset=7),
        data_frame(master.outgoing, 0, 1, 0, 0, records),
        data_frame(master.outgoing, len(records), 1, 0, 0, b""),
    ]
    altered = bytearray(data_frame(master.outgoing, 0, 1, 0, 0, b"x" * 40))
    altered[20] ^= 1

    async def run() -> None:
        stream, transport = LinkStream(), FakeTransport()
        stream.connection_made(transport)
        data = b"".join(frames) + bytes(altered)
        feeding = asyncio.ensure_future(feed(stream, transport, data, [STAGED_BYTES // 3]))
        assert (await read_sealed_control(stream, slave.incoming, Kind.EPOCHS))["epochs"] == epochs
        assert (await read_sealed_control(stream, slave.incoming, Kind.START)) == {"offset": 7}
        kind, payload = await read_sealed(stream, slave.incoming)
        assert kind is Kind.DATA and isinstance(payload, memoryview)
        assert payload[DATA_HEADER.size :] == records
        kind, payload = await read_sealed(stream, slave.incoming)
        assert kind is Kind.DATA and len(payload) == DATA_HEADER.size
        with pytest.raises(ForgedFrame):
            await read_sealed(stream, slave.incoming)
        await feeding

    asyncio.run(run())


def take_framed(taken: list[bytes], stream: LinkStream | None = None):
    """A taker of ``framed`` bodies: whole frames only, the rest left for the next arrival;
    with ``stream``, a frame larger than the staging buffer is gathered whole (``collect``)."""

    def take(unread: memoryview) -> int:
        used = 0
        while len(unread) - used >= HEADER.size:
            (length,) = HEADER.unpack_from(unread, used)
            if len(unread) - used - HEADER.size < length:
                if stream is not None and HEADER.size + length > STAGED_BYTES:
                    stream.collect(HEADER.size + length)
                break
            taken.append(bytes(unread[used + HEADER.size : used + HEADER.size + length]))
            used += HEADER.size + length
        return used

    return take


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 64), min_size=1, max_size=40),
    cuts=st.lists(st.integers(1, 300), min_size=1, max_size=6),
    before=st.integers(0, 3),
)
def test_delivered_frames_are_taken_whole_and_in_order_however_the_reads_cut_them(
    lengths, cuts, before
):
    """Each arrival goes to the taker in the arrival's own callback (no task runs between
    them); frames read before ``deliver_to`` stay read; frames staged but unread are taken
    at once; the staging buffer never fills."""
    bodies = [bytes((i + j) % 251 for j in range(n)) for i, n in enumerate(lengths)]
    data = framed(bodies)
    ends = list(itertools.accumulate(HEADER.size + n for n in lengths))

    async def run() -> None:
        stream, transport = LinkStream(), FakeTransport()
        stream.connection_made(transport)
        head = framed(bodies[:before])
        staged = arrive(stream, data[: len(head) + 7])  # those frames and part of the next
        assert await read_frames(stream, min(before, len(bodies))) == bodies[:before]
        taken: list[bytes] = []
        stream.deliver_to(take_framed(taken))
        position, turn = staged, 0
        while position < len(data):
            position += arrive(stream, data[position : position + cuts[turn % len(cuts)]])
            turn += 1
            whole = [b for b, end in zip(bodies, ends, strict=True) if end <= position]
            assert taken == whole[before:]  # taken in the callback, nothing awaited
            assert not transport.paused
        assert taken == bodies[before:]

    asyncio.run(run())


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(sizes, min_size=1, max_size=8),
    cuts=st.lists(st.integers(1, 3 * STAGED_BYTES), min_size=1, max_size=6),
)
def test_a_frame_larger_than_the_staging_buffer_is_gathered_whole_for_the_taker(lengths, cuts):
    """A slave's DATA frame of a batch (~128 KiB) cannot wait in the staging buffer: the
    taker asks for it (``collect``), the loop's reads fill a buffer of the frame's own, and
    the taker is handed it alone once whole; small frames around it are taken as before."""
    bodies = [bytes((i + j) % 251 for j in range(n)) for i, n in enumerate(lengths)]
    data = framed(bodies)
    ends = list(itertools.accumulate(HEADER.size + n for n in lengths))

    async def run() -> None:
        stream, transport = LinkStream(), FakeTransport()
        stream.connection_made(transport)
        taken: list[bytes] = []
        stream.deliver_to(take_framed(taken, stream))
        position, turn = 0, 0
        while position < len(data):
            position += arrive(stream, data[position : position + cuts[turn % len(cuts)]])
            turn += 1
            assert taken == [b for b, end in zip(bodies, ends, strict=True) if end <= position]
            assert not transport.paused
        assert taken == bodies

    asyncio.run(run())


def test_a_taker_ends_its_link_by_raising_or_finishing_and_the_peer_by_closing():
    async def run() -> None:
        def refuse(unread: memoryview) -> int:
            raise LinkError("not an ACK")

        stream, transport = LinkStream(), FakeTransport()
        stream.connection_made(transport)
        stream.deliver_to(refuse)
        ending = asyncio.ensure_future(stream.ended())
        await asyncio.sleep(0)
        assert not ending.done()
        arrive(stream, b"x")  # the taker raises: the transport is aborted at once
        assert transport.closed
        with pytest.raises(LinkError, match="not an ACK"):
            await ending

        stream, transport = LinkStream(), FakeTransport()
        stream.connection_made(transport)
        stream.deliver_to(lambda unread: 0)
        ending = asyncio.ensure_future(stream.ended())
        await asyncio.sleep(0)
        stream.finish()
        await asyncio.wait_for(ending, 5)  # ends quietly

        stream, transport = LinkStream(), FakeTransport()
        stream.connection_made(transport)
        stream.deliver_to(lambda unread: 0)
        ending = asyncio.ensure_future(stream.ended())
        await asyncio.sleep(0)
        stream.connection_lost(ConnectionResetError("reset by peer"))
        with pytest.raises(ConnectionError, match="reset by peer"):
            await ending
        stream = LinkStream()
        stream.connection_made(FakeTransport())
        stream.deliver_to(lambda unread: 0)
        stream.eof_received()
        with pytest.raises(ConnectionError, match="ended the link"):
            await stream.ended()

    asyncio.run(run())


frame_kinds = st.sampled_from([Kind.ACK, Kind.DATA, Kind.REFUSED, Kind.START, 99])


@settings(max_examples=200, deadline=None)
@given(
    frames=st.lists(
        st.tuples(frame_kinds, st.binary(max_size=40), st.booleans()), min_size=1, max_size=8
    ),
    limit=st.sampled_from([24, 29, 64]),
    cuts=st.lists(st.integers(1, 60), min_size=1, max_size=5),
)
def test_taking_sealed_frames_as_they_arrive_is_reading_them(frames, limit, cuts):
    """``take_sealed`` over the bytes as they arrive, cut anywhere, yields the frames and
    the error that ``read_sealed`` yields reading them: its twin for the master's ACKs."""
    handshake = Handshake("group", "slave-1", "a" * 32, "b" * 32)
    sender = session_macs("secret", handshake, Role.SLAVE).outgoing
    wire = b""
    for kind, payload, altered in frames:
        if kind is Kind.REFUSED:
            payload = b'{"reason": "no"}'
        frame = bytearray(sealed(sender, kind, payload))
        if altered:
            frame[-1] ^= 1
        wire += bytes(frame)

    def outcome(read) -> tuple[list, str]:
        got: list = []
        try:
            read(got)
        except LinkError as error:
            return got, f"{type(error).__name__}: {error}"
        return got, ""

    def by_reading(got: list) -> None:
        async def run() -> None:
            reader = asyncio.StreamReader()
            reader.feed_data(wire)
            reader.feed_eof()
            mac = session_macs("secret", handshake, Role.MASTER).incoming
            while len(got) < len(frames):
                kind, payload = await read_sealed(reader, mac, limit)
                got.append((kind, bytes(payload)))

        asyncio.run(run())

    def by_taking(got: list) -> None:
        mac = session_macs("secret", handshake, Role.MASTER).incoming
        arrived, position, turn = b"", 0, 0
        while len(got) < len(frames):
            if position < len(wire):
                size = cuts[turn % len(cuts)]
                arrived += wire[position : position + size]
                position, turn = position + size, turn + 1
            frame = take_sealed(memoryview(arrived), mac, limit)
            if frame is None:
                assert position < len(wire), "a whole frame was not taken"
                continue
            kind, payload, size = frame
            got.append((kind, bytes(payload)))
            arrived = arrived[size:]

    assert outcome(by_taking) == outcome(by_reading)


@settings(max_examples=150, deadline=None)
@given(
    lengths=st.lists(sizes, min_size=1, max_size=8),
    first=st.integers(0, 4 * STAGED_BYTES),
    lent=st.integers(0, 4 * STAGED_BYTES),
    stop=st.integers(0, 8),
)
def test_a_socket_lent_to_a_thread_and_taken_back_loses_and_repeats_no_frame(
    lengths, first, lent, stop
):
    """``lend`` pauses reading and gives up the bytes not taken yet; the thread reads on
    from the socket, takes whole frames up to one it stops at, and ``take_back`` delivers
    what it left to the taker before the loop reads again: every frame is taken once, in
    order, by the taker or by the thread."""
    bodies = [bytes((i + j) % 251 for j in range(n)) for i, n in enumerate(lengths)]
    data = framed(bodies)

    async def run() -> None:
        stream, transport = LinkStream(), FakeTransport()
        stream.connection_made(transport)
        taken: list[bytes] = []
        stream.deliver_to(take_framed(taken, stream))
        position = 0
        while position < min(first, len(data)):
            position += arrive(stream, data[position:first])
        unread = stream.lend()
        if unread is None:  # a large frame is being gathered: not lent, read on
            assert stream._frame is not None
        else:
            assert transport.paused
            # The thread: what was given it and what it read, whole frames up to its stop.
            buffer = unread + data[position : position + lent]
            position = min(len(data), position + lent)
            by_thread = framed_prefix(buffer, stop)
            taken.extend(split_framed(buffer[:by_thread]))
            stream.take_back(buffer[by_thread:])
            assert not transport.paused
        while position < len(data):
            position += arrive(stream, data[position:])
        assert taken == bodies

    asyncio.run(run())


def framed_prefix(buffer: bytes, frames: int) -> int:
    """The length of ``buffer``'s first ``frames`` whole frames (fewer if fewer are whole)."""
    used = 0
    for _ in range(frames):
        if len(buffer) - used < HEADER.size:
            break
        (length,) = HEADER.unpack_from(buffer, used)
        if len(buffer) - used - HEADER.size < length:
            break
        used += HEADER.size + length
    return used


def split_framed(data: bytes) -> list[bytes]:
    bodies: list[bytes] = []
    take_framed(bodies)(memoryview(data))
    return bodies
