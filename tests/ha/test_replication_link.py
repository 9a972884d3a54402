"""The replication link against a man in the middle: a proxy between a slave and its
master (both in this process, real stores) that alters, replays or injects frames. The
slave must store nothing forged, truncate nothing and record no epoch it was not sent,
and say why it dropped the link; once the proxy is honest again it catches up, byte for
byte.

The proxy only knows the outer framing (``kind | length | body``), so each attack is the
same bytes whatever the frames hold."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import hmac
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

import ha.link_thread
import ha.replica_lane
import ha.slave
from ferrymq.codec.dead_peer import DEAD_LINK_S
from ha.epochs import EpochEntry, EpochHistory
from ha.link_auth import (
    Handshake,
    LinkMacs,
    Role,
    new_nonce,
    proof,
    proof_matches,
    session_macs,
)
from ha.master import CHUNK_BYTES, SILENT_SLAVE_TIMEOUT_S, ReplicationMaster
from ha.slave import ReplicationSlave
from ha.wire import (
    ACK,
    DATA_HEADER,
    FRAME_HEADER,
    PROTOCOL_VERSION,
    ForgedFrame,
    Kind,
    LinkError,
    control,
    data_frame,
    read_sealed,
    read_sealed_control,
    sealed_control,
)
from store.config import FlushMode, StoreConfig
from store.errors import DiskFullError
from store.message import Message
from store.message_store import MessageStore

SECRET = "the-real-cluster-secret"
GROUP = "group-1"
MARKER = b"GENUINE-BODY"
FORGED = b"FORGED!-BODY"  # the same length: the forgery keeps every record's size
TIMEOUT_S = 30.0
# Enough 1 KiB records for several DATA frames (a frame carries up to CHUNK_BYTES).
BATCH = 3 * CHUNK_BYTES // 1024

# (frame number on this connection, kind, the frame's bytes) -> the frames to pass on.
Tamper = Callable[[int, int, bytes], list[bytes]]


def open_store(directory: str, flush_mode: FlushMode = FlushMode.ASYNC_FLUSH) -> MessageStore:
    return MessageStore.open(
        StoreConfig(
            data_dir=directory,
            flush_mode=flush_mode,
            commitlog_segment_bytes=8 << 20,
            consume_queue_entries_per_file=10_000,
            index_slot_count=10_007,
            index_entry_count=40_000,
        )
    )


def put_batch(store: MessageStore, prefix: str, count: int = BATCH) -> None:
    for start in range(0, count, 64):
        messages = [
            Message("orders", MARKER + f"-{prefix}-{i:06d}-".encode() + b"x" * 980)
            for i in range(start, min(count, start + 64))
        ]
        assert store.put_messages(messages).ok


def log_bytes(store: MessageStore) -> bytes:
    commitlog, chunks, offset = store.commitlog, [], 0
    while offset < commitlog.write_offset:
        chunk = commitlog.read_records(offset, CHUNK_BYTES)
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def carries_records(kind: int, frame: bytes) -> bool:
    """A DATA frame with records (a heartbeat holds the data header and, sealed, a tag)."""
    return kind == Kind.DATA and len(frame) > FRAME_HEADER.size + DATA_HEADER.size + 64


class Proxy:
    """Forwards whole frames between a slave and its master; ``to_slave`` and
    ``to_master`` may change what passes (``Tamper``)."""

    def __init__(self, master_port: int) -> None:
        self.master_port = master_port
        self.to_slave: Tamper | None = None
        self.to_master: Tamper | None = None
        self.server: asyncio.Server | None = None
        self.connections = 0

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._connect, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _connect(self, slave_reader, slave_writer) -> None:
        self.connections += 1
        master_reader, master_writer = await asyncio.open_connection("127.0.0.1", self.master_port)
        pipes = [
            asyncio.ensure_future(self._pipe(master_reader, slave_writer, lambda: self.to_slave)),
            asyncio.ensure_future(self._pipe(slave_reader, master_writer, lambda: self.to_master)),
        ]
        await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        for pipe in pipes:
            pipe.cancel()
        slave_writer.close()
        master_writer.close()

    @staticmethod
    async def _pipe(reader, writer, tamper: Callable[[], Tamper | None]) -> None:
        number = 0
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                header = await reader.readexactly(FRAME_HEADER.size)
                kind, length = FRAME_HEADER.unpack(header)
                frame = header + await reader.readexactly(length)
                change = tamper()
                for out in change(number, kind, frame) if change else [frame]:
                    writer.write(out)
                await writer.drain()
                number += 1


@dataclass
class Link:
    """A master with one batch of records, a slave that copied it honestly through the
    proxy, then stopped; the master then got a second batch."""

    master_store: MessageStore
    master_epochs: EpochHistory
    slave_store: MessageStore
    slave_epochs: EpochHistory
    master: ReplicationMaster
    proxy: Proxy
    slave: ReplicationSlave
    first_end: int
    rollback_dir: str
    stores: list[MessageStore] = field(default_factory=list)

    async def caught_up(self) -> None:
        await eventually(
            lambda: (
                self.slave_store.commitlog.write_offset == self.master_store.commitlog.write_offset
            ),
            "the slave to reach the master's end",
        )


async def eventually(condition: Callable[[], object], what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT_S
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {TIMEOUT_S} s waiting for {what}")
        await asyncio.sleep(0.01)


async def master_with_records(directory: str, prefix: str) -> tuple:
    store = open_store(directory)
    epochs = EpochHistory(directory)
    epochs.append(1, 0)
    put_batch(store, prefix)
    master = ReplicationMaster(
        store,
        epochs,
        "master-1",
        GROUP,
        SECRET,
        sync=False,
        min_insync_replicas=1,
        is_member=lambda node_id: node_id.startswith("slave-"),
    )
    port = await master.listen("127.0.0.1", 0)
    master.activate(frozenset())
    return store, epochs, master, port


@contextlib.asynccontextmanager
async def honest_link(tmp_path, slave_id: str = "slave-1"):
    master_store, master_epochs, master, port = await master_with_records(
        str(tmp_path / "master"), "first"
    )
    slave_dir = str(tmp_path / slave_id)
    slave_store = open_store(slave_dir)
    slave_epochs = EpochHistory(slave_dir)
    proxy = Proxy(port)
    address = await proxy.start()
    slave = ReplicationSlave(slave_store, slave_epochs, slave_id, SECRET, lambda: address)
    link = Link(
        master_store,
        master_epochs,
        slave_store,
        slave_epochs,
        master,
        proxy,
        slave,
        master_store.commitlog.write_offset,
        os.path.join(slave_dir, "rollback"),
        [master_store, slave_store],
    )
    try:
        slave.start()
        await link.caught_up()
        await slave.stop()
        put_batch(master_store, "second")
        yield link
    finally:
        await slave.stop()
        await master.close()
        await proxy.close()
        for store in link.stores:
            store.shutdown()


def once(change: Callable[[int, int, bytes], list[bytes] | None]) -> tuple[Tamper, list[int]]:
    """A tamper that applies ``change`` to the first frame it accepts (returns a list
    for), then passes everything on; the list it returns with it counts the attacks."""
    done: list[int] = []

    def tamper(number: int, kind: int, frame: bytes) -> list[bytes]:
        if not done:
            changed = change(number, kind, frame)
            if changed is not None:
                done.append(number)
                return changed
        return [frame]

    return tamper, done


def replace_once(pattern: bytes, replacement: Callable[[re.Match], bytes]) -> Tamper:
    def change(number: int, kind: int, frame: bytes) -> list[bytes] | None:
        found = re.search(pattern, frame)
        if found is None:
            return None
        new = replacement(found)
        assert len(new) == len(found.group(0))  # the framing stays right
        return [frame[: found.start()] + new + frame[found.end() :]]

    return change


def alter_body(number: int, kind: int, frame: bytes) -> list[bytes] | None:
    """One record's body changed (its size, magic code and framing untouched)."""
    if not carries_records(kind, frame):
        return None
    return [frame.replace(MARKER, FORGED, 1)]


def plant_epoch(number: int, kind: int, frame: bytes) -> list[bytes] | None:
    """The DATA header's epoch made 7: a slave that believed it would record epoch 7."""
    if not carries_records(kind, frame):
        return None
    at = FRAME_HEADER.size + 8
    return [frame[:at] + (7).to_bytes(8, "big") + frame[at + 8 :]]


def max_offset_zero(found: re.Match) -> bytes:
    """WELCOME's max_offset made 0 (padded with JSON whitespace): a slave that believed
    it would cut its whole log."""
    return b'"max_offset": 0' + b" " * (len(found.group(0)) - len(b'"max_offset": 0'))


def repeat(number: int, kind: int, frame: bytes) -> list[bytes] | None:
    """A DATA frame replayed at once, within its session."""
    return [frame, frame] if carries_records(kind, frame) else None


ATTACKS: dict[str, Callable[[int, int, bytes], list[bytes] | None]] = {
    "data-record-altered": alter_body,
    "data-epoch-planted": plant_epoch,
    "welcome-max-offset-lowered": replace_once(rb'"max_offset": \d+', max_offset_zero),
    "welcome-epochs-rewritten": replace_once(rb"\[\[1, 0\]\]", lambda found: b"[[9, 0]]"),
    "data-frame-replayed-in-session": repeat,
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_on_path_change_drops_the_link_before_the_slave_acts_on_it(attack, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ferrymq")

    async def run() -> None:
        async with honest_link(tmp_path) as link:
            tamper, done = once(ATTACKS[attack])
            link.proxy.to_slave = tamper
            link.slave.start()
            await eventually(lambda: done, "the attack")
            await link.caught_up()
            assert_nothing_forged(link, caplog)

    asyncio.run(run())


def test_a_frame_replayed_from_another_session_is_refused(tmp_path, caplog):
    """A DATA frame another master sent at the same offset, captured on the wire and
    replayed into this slave's session in place of its master's."""
    caplog.set_level(logging.INFO, logger="ferrymq")

    async def run() -> None:
        captured: list[bytes] = []

        def capture(number: int, kind: int, frame: bytes) -> list[bytes]:
            if carries_records(kind, frame) and not captured:
                captured.append(frame)
            return [frame]

        other_store, _, other, other_port = await master_with_records(
            str(tmp_path / "other-master"), "other"
        )
        witness_store = open_store(str(tmp_path / "witness"))
        try:
            async with honest_link(tmp_path) as link:
                link.stores.append(witness_store)
                # Another session: a witness slave copying the other master's log.
                witness_proxy = Proxy(other_port)
                address = await witness_proxy.start()
                witness_proxy.to_slave = capture
                witness = ReplicationSlave(
                    witness_store,
                    EpochHistory(str(tmp_path / "witness")),
                    "slave-2",
                    SECRET,
                    lambda: address,
                )
                witness.start()
                await eventually(lambda: captured, "a captured DATA frame")
                await witness.stop()
                await witness_proxy.close()
                # Made to start where this slave's log ends: the same offset as the
                # frame the real master sends first.
                at = FRAME_HEADER.size
                forged = captured[0][:at] + link.first_end.to_bytes(8, "big")
                forged += captured[0][at + 8 :]
                tamper, done = once(
                    lambda number, kind, frame: [forged] if carries_records(kind, frame) else None
                )
                link.proxy.to_slave = tamper
                link.slave.start()
                await eventually(lambda: done, "the replay")
                await link.caught_up()
                assert_nothing_forged(link, caplog)
        finally:
            await other.close()
            other_store.shutdown()

    asyncio.run(run())


def test_an_injected_frame_is_refused(tmp_path, caplog):
    """A DATA frame the attacker made: the master's next record with another body, put in
    after the master's first DATA frame, at the offset the slave then ends at."""
    caplog.set_level(logging.INFO, logger="ferrymq")

    async def run() -> None:
        async with honest_link(tmp_path) as link:
            commitlog = link.master_store.commitlog
            after_first = link.first_end + len(commitlog.read_records(link.first_end, CHUNK_BYTES))
            record = commitlog.read_records(after_first, 1).replace(MARKER, FORGED, 1)
            body = DATA_HEADER.pack(after_first, 1, 0, 0) + record
            injected = FRAME_HEADER.pack(Kind.DATA, len(body)) + body
            tamper, done = once(
                lambda number, kind, frame: (
                    [frame, injected] if carries_records(kind, frame) else None
                )
            )
            link.proxy.to_slave = tamper
            link.slave.start()
            await eventually(lambda: done, "the injection")
            await link.caught_up()
            assert_nothing_forged(link, caplog)

    asyncio.run(run())


def assert_nothing_forged(link: Link, caplog) -> None:
    """The slave holds its master's log byte for byte, the same epochs, cut nothing, and
    logged the forged frame as the reason it dropped the link."""
    assert log_bytes(link.slave_store) == log_bytes(link.master_store)
    assert FORGED not in log_bytes(link.slave_store)
    assert link.slave_epochs.entries == link.master_epochs.entries
    assert "truncating this log" not in caplog.text
    assert not os.path.isdir(link.rollback_dir) or not os.listdir(link.rollback_dir)
    assert "failed its MAC" in caplog.text
    assert link.proxy.connections >= 2  # the link dropped at the forgery, then reconnected


# ---- before authentication: size, silence, version, proofs ------------------------------
@contextlib.asynccontextmanager
async def lone_master(tmp_path, **timeouts):
    store = open_store(str(tmp_path / "master"))
    epochs = EpochHistory(str(tmp_path / "master"))
    master = ReplicationMaster(
        store,
        epochs,
        "master-1",
        GROUP,
        SECRET,
        sync=False,
        min_insync_replicas=1,
        is_member=lambda node_id: node_id.startswith("slave-"),
        **timeouts,
    )
    port = await master.listen("127.0.0.1", 0)
    master.activate(frozenset())
    try:
        yield master, port
    finally:
        await master.close()
        store.shutdown()


@contextlib.asynccontextmanager
async def fake_master(serve: Callable):
    """A server on a free port speaking as ``serve`` does; yields its address."""
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


@contextlib.contextmanager
def lone_slave(tmp_path, flush_mode: FlushMode = FlushMode.ASYNC_FLUSH, **timeouts):
    store = open_store(str(tmp_path / "slave"), flush_mode)
    try:
        yield ReplicationSlave(
            store,
            EpochHistory(str(tmp_path / "slave")),
            "slave-1",
            SECRET,
            lambda: None,
            **timeouts,
        )
    finally:
        store.shutdown()


async def read_whole_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    kind, length = FRAME_HEADER.unpack(await reader.readexactly(FRAME_HEADER.size))
    return kind, await reader.readexactly(length)


async def closed_by_peer(reader: asyncio.StreamReader) -> bool:
    """Whether the other end closed the connection (what it sent before is skipped)."""
    with contextlib.suppress(ConnectionResetError):
        while await reader.read(65536):
            pass
    return True


async def speak_slave(reader, writer, *, proof_role: Role = Role.SLAVE) -> LinkMacs:
    """A slave's side of the handshake, up to its HELLO: the link's MACs."""
    _, payload = await read_whole_frame(reader)
    challenge = json.loads(payload)
    handshake = Handshake(GROUP, "slave-1", challenge["nonce"], new_nonce())
    writer.write(
        control(
            Kind.HELLO,
            version=PROTOCOL_VERSION,
            node_id="slave-1",
            nonce=handshake.slave_nonce,
            proof=proof(SECRET, proof_role, handshake),
            max_offset=0,
            segment_bytes=8 << 20,
        )
    )
    await writer.drain()
    macs = session_macs(SECRET, handshake, Role.SLAVE)
    return macs


async def speak_master(reader, writer, *, reflect: bool = False) -> LinkMacs:
    """A master's side of the handshake that knows the secret; ``reflect``: its WELCOME
    answers with the slave's own proof instead of a master's."""
    nonce = new_nonce()
    writer.write(control(Kind.CHALLENGE, version=PROTOCOL_VERSION, nonce=nonce, group=GROUP))
    await writer.drain()
    _, payload = await read_whole_frame(reader)
    hello = json.loads(payload)
    handshake = Handshake(GROUP, hello["node_id"], nonce, hello["nonce"])
    macs = session_macs(SECRET, handshake, Role.MASTER)
    answer = hello["proof"] if reflect else proof(SECRET, Role.MASTER, handshake)
    welcome = {"proof": answer, "max_offset": 0, "min_offset": 0}
    writer.write(sealed_control(macs.outgoing, Kind.WELCOME, **welcome))
    writer.write(sealed_control(macs.outgoing, Kind.EPOCHS, epochs=[]))
    await writer.drain()
    return macs


async def start_streaming(master: ReplicationMaster, reader, writer) -> LinkMacs:
    """A slave's whole handshake from offset 0, until the master holds the link."""
    macs = await speak_slave(reader, writer)
    await read_sealed_control(reader, macs.incoming, Kind.WELCOME)
    await read_sealed_control(reader, macs.incoming, Kind.EPOCHS)
    writer.write(sealed_control(macs.outgoing, Kind.START, offset=0))
    await writer.drain()
    await eventually(lambda: "slave-1" in master.links, "the link")
    return macs


def test_an_oversize_frame_before_authentication_is_refused_unread(tmp_path, caplog):
    """A HELLO (master side) or CHALLENGE (slave side) claiming 60 MiB: the link ends at its
    header, long before the handshake deadline, and nothing of it is read."""
    caplog.set_level(logging.INFO, logger="ferrymq")

    async def run() -> None:
        async with lone_master(tmp_path) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await read_whole_frame(reader)  # the CHALLENGE
            writer.write(FRAME_HEADER.pack(Kind.HELLO, 60 << 20) + b"\0" * 65536)
            # Well within the master's 5 s handshake deadline.
            assert await asyncio.wait_for(closed_by_peer(reader), 2.0)
            writer.close()
        assert f"a frame of {60 << 20} bytes is over the limit of 4096" in caplog.text

        async def huge_challenge(reader, writer) -> None:
            writer.write(FRAME_HEADER.pack(Kind.CHALLENGE, 60 << 20) + b"{" * 65536)
            await writer.drain()
            await closed_by_peer(reader)

        with lone_slave(tmp_path) as slave:
            async with fake_master(huge_challenge) as address:
                with pytest.raises(LinkError, match="over the limit of 4096"):
                    await asyncio.wait_for(slave._follow(address), 2.0)

    asyncio.run(run())


def test_a_silent_peer_is_dropped(tmp_path, caplog):
    """Every read has a deadline: a master that never says a word, a master that goes
    quiet after the handshake, a client that connects and says nothing, and a slave that
    stops answering after the handshake (the master's heartbeats get an ACK each)."""
    caplog.set_level(logging.INFO, logger="ferrymq")

    async def run() -> None:
        async def silent(reader, writer) -> None:
            await closed_by_peer(reader)

        async def quiet_after_handshake(reader, writer) -> None:
            await speak_master(reader, writer)
            await closed_by_peer(reader)

        with lone_slave(tmp_path, handshake_timeout_s=0.2, idle_timeout_s=0.2) as slave:
            async with fake_master(silent) as address:
                with pytest.raises(LinkError, match=r"handshake within 0\.2 s"):
                    await asyncio.wait_for(slave._follow(address), 5)
            async with fake_master(quiet_after_handshake) as address:
                with pytest.raises(LinkError, match=r"sent nothing for 0\.2 s"):
                    await asyncio.wait_for(slave._follow(address), 5)

        async with lone_master(tmp_path, handshake_timeout_s=0.2, silent_slave_timeout_s=0.2) as (
            master,
            port,
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            assert await asyncio.wait_for(closed_by_peer(reader), 5)
            writer.close()
            assert "no complete handshake within 0.2 s" in caplog.text

            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await start_streaming(master, reader, writer)
            # It reads the master's frames but never answers one.
            assert await asyncio.wait_for(closed_by_peer(reader), 5)
            writer.close()
            await eventually(lambda: "slave-1" not in master.links, "the link to go")
            assert "slave-1 sent nothing for 0.2 s" in caplog.text

    asyncio.run(run())


def test_a_link_the_kernel_ends_is_a_link_end_not_a_failure(tmp_path, caplog):
    """Over a cut network the kernel ends a link with an OSError that is no ConnectionError:
    EINVAL when the route to the slave is a blackhole (the chaos partitions), ETIMEDOUT from
    the dead-peer probes. The master drops the link and logs why, with no traceback."""
    caplog.set_level(logging.INFO, logger="ferrymq")

    async def run() -> None:
        async with lone_master(tmp_path) as (master, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await start_streaming(master, reader, writer)
            # What the loop does when a read of the link's socket fails so.
            stream = master.links["slave-1"].writer
            stream.connection_lost(OSError(errno.EINVAL, "Invalid argument"))
            await eventually(lambda: "slave-1" not in master.links, "the link to go")
            writer.close()

    asyncio.run(run())
    assert "ended: link closed: [Errno 22] Invalid argument" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_a_slave_too_busy_to_read_keeps_its_link(tmp_path, caplog):
    """A starved slave stops reading: its TCP window closes while the master has records
    to send, yet its kernel answers every probe. That is a slow slave, not a dead one:
    the link stays (the backlog rule, not the link, decides whether writes wait for it).
    Linux ends a connection whose peer's window stays closed past ``TCP_USER_TIMEOUT``;
    with the dead-link time of 2 s there, the master dropped such a slave after ~2.5 s."""
    caplog.set_level(logging.INFO, logger="ferrymq")

    async def run() -> None:
        async with lone_master(tmp_path, silent_slave_timeout_s=60.0) as (master, port):
            put_batch(master.store, "bulk", count=16_000)  # more than both kernel buffers
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await start_streaming(master, reader, writer)
            link = master.links["slave-1"]
            # From here on nothing is read: the window closes, the master's buffer fills.
            await eventually(
                lambda: link.writer is not None and link.writer.transport.get_write_buffer_size(),
                "the window to close",
            )
            closed_at = time.monotonic()
            while time.monotonic() - closed_at < DEAD_LINK_S + 3:
                assert master.links.get("slave-1") is link, caplog.text[-2000:]
                await asyncio.sleep(0.1)
            writer.close()

    asyncio.run(run())


def test_a_peer_of_the_old_protocol_is_refused_with_a_precise_message(tmp_path, caplog):
    """Protocol 1 had no version in CHALLENGE and HELLO. A slave of protocol 1 gets a
    REFUSED saying why (which its own log shows) and the master logs it; a slave meeting a
    master of protocol 1 sends it nothing and logs why."""
    caplog.set_level(logging.INFO, logger="ferrymq")
    message = "speaks replication protocol 1, this node speaks 2"

    async def run() -> None:
        async with lone_master(tmp_path) as (_, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            _, payload = await read_whole_frame(reader)
            nonce = json.loads(payload)["nonce"]
            old_proof = hmac.new(SECRET.encode(), f"{nonce}|slave-1".encode(), hashlib.sha256)
            hello = {"node_id": "slave-1", "nonce": "n", "proof": old_proof.hexdigest()}
            body = json.dumps({**hello, "max_offset": 0, "segment_bytes": 8 << 20}).encode()
            writer.write(FRAME_HEADER.pack(Kind.HELLO, len(body)) + body)
            kind, payload = await read_whole_frame(reader)
            writer.close()
            assert kind == Kind.REFUSED
            assert message in json.loads(payload)["reason"]
        assert f"replication: refused slave-1 (slave slave-1 {message}" in caplog.text

        heard: list[bytes] = []

        async def old_master(reader, writer) -> None:
            body = json.dumps({"nonce": "abc", "group": GROUP}).encode()
            writer.write(FRAME_HEADER.pack(Kind.CHALLENGE, len(body)) + body)
            await writer.drain()
            heard.append(await reader.read())  # until the slave closes

        with lone_slave(tmp_path) as slave:
            async with fake_master(old_master) as address:
                slave.master_address = lambda: address
                slave.start()
                await eventually(lambda: heard, "the slave to hang up")
                await slave.stop()
        assert heard == [b""]  # no HELLO
        assert f"replication from {address} refused: master {address} {message}" in caplog.text

    asyncio.run(run())


def test_a_proof_passes_only_as_the_role_that_made_it():
    """Reflection: each end's proof covers the same handshake under its own role, so a
    node's proof never passes as the other end's, whatever the node is called."""
    handshake = Handshake(GROUP, "master", new_nonce(), new_nonce())
    for role in Role:
        made = proof(SECRET, role, handshake)
        assert proof_matches(SECRET, role, handshake, made)
        assert not proof_matches(SECRET, role.other, handshake, made)
    swapped = Handshake(GROUP, "master", handshake.slave_nonce, handshake.master_nonce)
    assert not proof_matches(SECRET, Role.SLAVE, swapped, proof(SECRET, Role.SLAVE, handshake))


def test_a_reflected_proof_is_refused_at_both_ends(tmp_path, caplog):
    """Even in frames sealed with the right keys: a WELCOME that answers with the slave's
    own proof is refused by the slave, and a HELLO that carries a master's proof is
    refused by the master."""
    caplog.set_level(logging.INFO, logger="ferrymq")

    async def run() -> None:
        async def reflecting(reader, writer) -> None:
            await speak_master(reader, writer, reflect=True)
            await closed_by_peer(reader)

        with lone_slave(tmp_path) as slave:
            async with fake_master(reflecting) as address:
                with pytest.raises(ForgedFrame, match="did not prove it knows the cluster"):
                    await asyncio.wait_for(slave._follow(address), 5)
            assert slave.store.commitlog.write_offset == 0 and not slave.epochs.entries

        async with lone_master(tmp_path) as (master, port):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await speak_slave(reader, writer, proof_role=Role.MASTER)
            kind, payload = await read_whole_frame(reader)
            writer.close()
            assert kind == Kind.REFUSED and b"wrong cluster secret" in payload
            assert not master.links
        assert "replication: refused slave-1 (wrong cluster secret)" in caplog.text

    asyncio.run(run())


def test_stopping_a_slave_waits_for_the_cut_it_began(tmp_path):
    """A promotion stops the slave, then writes at the log's end. A cut runs on an
    executor thread that cancelling the slave does not stop: the promotion once went on
    while the log was still being cut under it."""
    with lone_slave(tmp_path) as slave:
        store = slave.store
        assert store.put_messages([Message.build("t", b"x" * 100, queue_id=0)] * 5).ok
        end = store.write_offset
        slave.epochs.append(1, 0)
        entered, release = threading.Event(), threading.Event()
        keep_and_cut = slave._keep_and_cut

        def slow_cut(epoch: int, point: int) -> None:
            entered.set()
            release.wait(TIMEOUT_S)
            keep_and_cut(epoch, point)

        slave._keep_and_cut = slow_cut

        async def cut_then_stop() -> None:
            slave._task = asyncio.ensure_future(
                slave._truncate_to_common_point(0, [EpochEntry(2, 0)])
            )
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, entered.wait, TIMEOUT_S)
            stopping = asyncio.ensure_future(slave.stop())
            done, _ = await asyncio.wait({stopping}, timeout=0.3)
            assert not done and store.write_offset == end  # the cut has not happened yet
            release.set()
            await asyncio.wait_for(stopping, TIMEOUT_S)

        asyncio.run(cut_then_stop())
        assert store.write_offset == 0 and slave.epochs.entries == []


def test_a_slave_that_stops_says_so_and_leaves_once_the_in_sync_set_lost_it(
    tmp_path, caplog, monkeypatch
):
    """A link that merely ends keeps its slave in the in-sync set for the grace of a
    failover's reconnection (``DISCONNECT_GRACE_S``). A slave that stops following (its
    node shuts down) says LEAVING: its master counts it lagging at once and wakes the
    role to drop it, and closes the link once it is no longer counted (at once if it
    never was), which the slave waits for: its node's routing replica, closed next, may
    lead routing. Without this, each slave of a rolling restart held SYNC writes ~1 s.
    The master's clock stands still here: only the frame can tell."""
    caplog.set_level(logging.INFO, logger="ferrymq")
    # Only the master's close ends the slave's wait within the test's deadline.
    monkeypatch.setattr(ha.slave, "LEAVE_WAIT_S", 4 * TIMEOUT_S)
    monkeypatch.setattr(ha.slave, "STOP_TIMEOUT_S", 4 * TIMEOUT_S)

    async def run(slave: ReplicationSlave) -> None:
        async with lone_master(tmp_path, clock=lambda: 1000.0) as (master, port):
            woken: list[bool] = []
            master.on_slave_gone = lambda: woken.append(True)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            await start_streaming(master, reader, writer)
            writer.close()  # a link that ends with no word
            await eventually(lambda: "slave-1" not in master.links, "the link to go")
            assert not master.lagging("slave-1", 60.0, 1 << 40) and woken == []

            slave.master_address = lambda: f"127.0.0.1:{port}"
            for counted in (frozenset({"slave-1"}), frozenset()):
                master.set_counted(counted)
                woken.clear()
                slave.start()
                await eventually(
                    lambda: "slave-1" in master.links and slave.connected_to, "the slave's link"
                )
                assert not master.lagging("slave-1", 60.0, 1 << 40)
                stopping = asyncio.ensure_future(slave.stop(leaving=True))
                if counted:
                    await eventually(lambda: woken, "the master to hear LEAVING")
                    assert master.lagging("slave-1", 60.0, 1 << 40)
                    assert not master.caught_up("slave-1")  # never added back meanwhile
                    assert not stopping.done() and "slave-1" in master.links
                    master.set_counted(frozenset())  # routing dropped it
                await asyncio.wait_for(stopping, TIMEOUT_S)
                await eventually(lambda: "slave-1" not in master.links, "the link to go")
                assert master.lagging("slave-1", 60.0, 1 << 40)

            # A promotion stops following without a word: it must not wait on a master
            # that may be cut off, and that master gives the link its grace.
            slave.start()
            await eventually(lambda: slave.connected_to, "the slave's link")
            await asyncio.wait_for(slave.stop(), TIMEOUT_S)
            await eventually(lambda: "slave-1" not in master.links, "the link to go")
            assert not master.lagging("slave-1", 60.0, 1 << 40)

    with lone_slave(tmp_path) as slave:
        asyncio.run(run(slave))
    assert "slave-1 stops following this master" in caplog.text


def test_a_slave_whose_link_thread_runs_leaves_as_soon_as_its_master_closes(tmp_path, monkeypatch):
    """Stopping a slave while the link's thread reads its socket gives the socket back to
    the loop: the slave's LEAVING is answered by the master's close, which the slave
    hears at once (a transport left paused would wait out ``LEAVE_WAIT_S``)."""
    monkeypatch.setattr(ha.slave, "LEAVE_WAIT_S", 4 * TIMEOUT_S)
    monkeypatch.setattr(ha.slave, "STOP_TIMEOUT_S", 4 * TIMEOUT_S)
    lent: list[bool] = []
    start_thread = ha.link_thread.LinkThread.start

    def counted_start(self, acked: int) -> bool:
        started = start_thread(self, acked)
        lent.append(started)
        return started

    monkeypatch.setattr(ha.link_thread.LinkThread, "start", counted_start)

    async def run() -> None:
        async with honest_link(tmp_path) as link:
            lent.clear()
            link.slave.start()
            await link.caught_up()
            assert any(lent), "the link's thread followed"
            # Well before anything else would end the link: the master drops a slave
            # silent for SILENT_SLAVE_TIMEOUT_S (10 s). (``stop`` outlives a wait_for's
            # cancellation by design, so the time it took is what tells.)
            loop = asyncio.get_running_loop()
            began = loop.time()
            await link.slave.stop(leaving=True)
            assert loop.time() - began < SILENT_SLAVE_TIMEOUT_S / 2
            assert log_bytes(link.slave_store) == log_bytes(link.master_store)

    asyncio.run(run())


def test_a_link_thread_that_fails_to_start_ends_the_link_and_is_closed(
    tmp_path, monkeypatch, caplog
):
    """A thread that cannot start (no thread or fd to be had) ends the link with the
    error, and the link's thread is closed like every other end of the link: nothing is
    left listening on its eventfd."""
    caplog.set_level(logging.INFO, logger="ferrymq")
    closed: list[bool] = []
    close_thread = ha.link_thread.LinkThread.close

    def failing_start(self, acked: int) -> bool:
        raise OSError(errno.EMFILE, "injected: no fd left")

    def counted_close(self) -> None:
        close_thread(self)
        closed.append(self.closed)

    async def run() -> None:
        async with honest_link(tmp_path) as link:
            monkeypatch.setattr(ha.link_thread.LinkThread, "start", failing_start)
            monkeypatch.setattr(ha.link_thread.LinkThread, "close", counted_close)
            link.slave.start()
            await eventually(lambda: "injected: no fd left" in caplog.text, "the link's end")
            await link.slave.stop()
            assert closed and all(closed)

    asyncio.run(run())


def test_a_slave_acknowledges_records_before_it_dispatches_them(tmp_path, monkeypatch):
    """A slave's ACK says its CommitLog holds the bytes (what a failover needs); its own
    consume-queue and index work comes after the ACK is written, off the SYNC write's
    path, and leaves the same entries as the master's. In the loop's callback, as a
    SYNC_FLUSH slave follows (the link's thread sends its ACKs before Python hears of the
    records at all: tests/ha/test_link_thread.py)."""
    import ha.slave

    monkeypatch.setattr(ha.link_thread, "usable", lambda macs: False)

    async def run() -> None:
        async with honest_link(tmp_path) as link:
            acked: list[int] = []  # the offsets of the ACKs written, in order
            late: list[int] = []  # a chunk's end dispatched before its ACK was written
            write = ha.slave.write_frame
            store = link.slave_store
            dispatch = store.dispatch_replicated

            def writing(writer, frame: bytes) -> None:
                if FRAME_HEADER.unpack_from(frame)[0] == Kind.ACK:
                    acked.append(ACK.unpack_from(frame, FRAME_HEADER.size)[0])
                write(writer, frame)

            def dispatching() -> None:
                end = store.commitlog.write_offset
                if not acked or acked[-1] != end:
                    late.append(end)
                dispatch()

            monkeypatch.setattr(ha.slave, "write_frame", writing)
            monkeypatch.setattr(store, "dispatch_replicated", dispatching)
            link.slave.start()
            await link.caught_up()
            await eventually(
                lambda: (
                    store.dispatcher.dispatched_offset == link.master_store.commitlog.write_offset
                ),
                "the slave's dispatch",
            )
            assert acked and not late
            for (topic, queue_id), queue in link.master_store.consume_queues.queues.items():
                assert store.consume_queues.get(topic, queue_id).max_offset == queue.max_offset

    asyncio.run(run())


def small_frames(tmp_path, count: int) -> tuple[list[tuple[int, bytes]], int]:
    """``count`` appends of one small message each, as (offset, records), and the log's
    end: what a master pushes under single sends, one frame per append."""
    source = open_store(str(tmp_path / "source"))
    try:
        appends = []
        for i in range(count):
            start = source.commitlog.write_offset
            assert source.put_messages([Message("orders", f"small-{i:03d}".encode())]).ok
            appends.append((start, source.commitlog.read_records(start, CHUNK_BYTES)))
        return appends, source.commitlog.write_offset
    finally:
        source.shutdown()


def counted_flushes(
    slave: ReplicationSlave, monkeypatch, hold_first: threading.Event | None = None
):
    """The end on disk after each of the slave's flushes; ``hold_first``: the first
    flush, done, waits for it before it returns (on its executor thread), as a slow
    fsync would."""
    flushes: list[int] = []
    flush = slave.store.flush_log

    def flushing() -> int:
        end = flush()
        flushes.append(end)
        if hold_first is not None and len(flushes) == 1:
            assert hold_first.wait(TIMEOUT_S)
        return end

    monkeypatch.setattr(slave.store, "flush_log", flushing)
    return flushes


def test_frames_that_arrived_together_are_flushed_and_acknowledged_together(tmp_path, monkeypatch):
    """The master pushes each append as a small frame of its own. A SYNC_FLUSH slave that
    flushed and acknowledged each one before reading the next kept ~300 frames a second
    while its master group-commits many appends per fsync: under ASYNC replication it
    fell behind for as long as the load lasted and left the in-sync set (the chaos
    suite's async-sync-flush runs). The frames already arrived share one flush and one
    ACK, which still says "on disk" for everything up to its offset."""
    appends, end = small_frames(tmp_path, 60)
    acks: list[int] = []

    async def master_of_small_frames(reader, writer) -> None:
        macs = await speak_master(reader, writer)
        # Every frame is on its way before the slave has read its first one.
        writer.write(
            b"".join(
                data_frame(macs.outgoing, offset, 1, 0, 0, records) for offset, records in appends
            )
        )
        await writer.drain()
        await read_sealed_control(reader, macs.incoming, Kind.START)
        while not acks or acks[-1] < end:
            kind, payload = await read_sealed(reader, macs.incoming)
            assert kind is Kind.ACK
            acks.append(ACK.unpack(payload)[0])
        writer.close()

    async def run() -> None:
        with lone_slave(tmp_path, FlushMode.SYNC_FLUSH) as slave:
            flushes = counted_flushes(slave, monkeypatch)
            async with fake_master(master_of_small_frames) as address:
                with pytest.raises(LinkError, match="link closed"):
                    await asyncio.wait_for(slave._follow(address), TIMEOUT_S)
            assert [r for _, r in appends] == split_records(log_bytes(slave.store), appends)
            assert acks[0] == 0 and acks[-1] == end  # the first: where streaming starts
            # 60 frames of ~100 bytes arrive in one or two reads of the link.
            assert len(flushes) <= 3, flushes
            assert len(acks) <= 4, acks
            assert flushes[-1] == end

    asyncio.run(run())


def split_records(log: bytes, appends: list[tuple[int, bytes]]) -> list[bytes]:
    return [log[offset : offset + len(records)] for offset, records in appends]


def test_a_sync_flush_slave_appends_on_while_its_flush_runs(tmp_path, monkeypatch):
    """Frames that arrive while a flush runs are appended at once, not after it, and none
    is acknowledged before a flush covers it: the next flush takes them all, as a master
    group-commits its writers. A slave that awaited each flush before reading on held a
    busy link to one frame per fsync (a SYNC_FLUSH group's batch was a third of the same
    group's under ASYNC_FLUSH)."""
    appends, end = small_frames(tmp_path, 20)
    first_end = appends[1][0]
    hold = threading.Event()
    acks: list[int] = []  # as the slave wrote them

    async def master_of_frames_during_a_flush(reader, writer) -> None:
        macs = await speak_master(reader, writer)
        frames = [data_frame(macs.outgoing, o, 1, 0, 0, r) for o, r in appends]
        writer.write(frames[0])
        await read_sealed_control(reader, macs.incoming, Kind.START)
        await eventually(lambda: flushes, "the first flush")
        for frame in frames[1:]:  # one at a time, while the first flush is held
            writer.write(frame)
            await writer.drain()
        await eventually(
            lambda: slave.store.commitlog.write_offset == end, "appends during the flush"
        )
        assert set(acks) == {0}, acks  # only where streaming starts: nothing flushed yet
        hold.set()
        await eventually(lambda: acks[-1] == end, "the ACK of the second flush")
        writer.close()

    async def run() -> None:
        write = ha.slave.write_frame

        def writing(writer, frame: bytes) -> None:
            if FRAME_HEADER.unpack_from(frame)[0] == Kind.ACK:
                acks.append(ACK.unpack_from(frame, FRAME_HEADER.size)[0])
            write(writer, frame)

        monkeypatch.setattr(ha.slave, "write_frame", writing)
        async with fake_master(master_of_frames_during_a_flush) as address:
            with pytest.raises(LinkError, match="link closed"):
                await asyncio.wait_for(slave._follow(address), TIMEOUT_S)
        assert flushes == [first_end, end]
        assert acks == [0, first_end, end]
        assert split_records(log_bytes(slave.store), appends) == [r for _, r in appends]

    with lone_slave(tmp_path, FlushMode.SYNC_FLUSH) as slave:
        flushes = counted_flushes(slave, monkeypatch, hold)
        try:
            asyncio.run(run())
        finally:
            hold.set()


def test_a_flush_that_fails_ends_the_link_with_its_error(tmp_path, monkeypatch):
    """A SYNC_FLUSH slave whose fsync fails acknowledges nothing of what it covered and
    ends the link with the disk's error (its replication loop logs it and dials again)."""
    appends, _ = small_frames(tmp_path, 3)
    acks: list[int] = []

    async def master(reader, writer) -> None:
        macs = await speak_master(reader, writer)
        writer.write(b"".join(data_frame(macs.outgoing, o, 1, 0, 0, r) for o, r in appends))
        await writer.drain()
        await read_sealed_control(reader, macs.incoming, Kind.START)
        with contextlib.suppress(LinkError):
            while True:
                kind, payload = await read_sealed(reader, macs.incoming)
                assert kind is Kind.ACK
                acks.append(ACK.unpack(payload)[0])

    def failing() -> int:
        raise OSError(errno.EIO, "injected: the disk failed")

    async def run() -> None:
        with lone_slave(tmp_path, FlushMode.SYNC_FLUSH) as slave:
            monkeypatch.setattr(slave.store, "flush_log", failing)
            async with fake_master(master) as address:
                with pytest.raises(OSError, match="injected: the disk failed"):
                    await asyncio.wait_for(slave._follow(address), TIMEOUT_S)
        assert acks == [0]  # where streaming starts; nothing after

    asyncio.run(run())


def test_a_slave_stops_at_once_while_its_flush_runs(tmp_path, monkeypatch):
    """Following ends (a promotion) without waiting for a flush in flight: it finishes on
    its thread and acknowledges nothing. A promotion that waited for the old master's
    last fsync would wait as long as a slow disk's."""
    [(offset, records)], end = small_frames(tmp_path, 1)
    hold = threading.Event()
    acks: list[int] = []

    async def master(reader, writer) -> None:
        macs = await speak_master(reader, writer)
        writer.write(data_frame(macs.outgoing, offset, 1, 0, 0, records))
        await writer.drain()
        await read_sealed_control(reader, macs.incoming, Kind.START)
        with contextlib.suppress(LinkError):
            while True:
                _, payload = await read_sealed(reader, macs.incoming)
                acks.append(ACK.unpack(payload)[0])

    async def run() -> None:
        with lone_slave(tmp_path, FlushMode.SYNC_FLUSH) as slave:
            flushes = counted_flushes(slave, monkeypatch, hold)
            try:
                async with fake_master(master) as address:
                    following = asyncio.ensure_future(slave._follow(address))
                    await eventually(lambda: flushes, "the flush")
                    following.cancel()
                    done, _ = await asyncio.wait([following], timeout=2)
                    assert done, "following waited for the flush"
            finally:
                hold.set()
            await eventually(lambda: slave.store.flushed_offset == end, "the flush to finish")
        assert acks == [0]  # where streaming starts; the held flush acknowledged nothing

    asyncio.run(run())


def counted_dispatches(slave: ReplicationSlave, monkeypatch) -> list[int]:
    """The log's end at each of the slave's dispatches."""
    ends: list[int] = []
    dispatch = slave.store.dispatch_replicated

    def dispatching() -> None:
        ends.append(slave.store.commitlog.write_offset)
        dispatch()

    monkeypatch.setattr(slave.store, "dispatch_replicated", dispatching)
    return ends


def test_a_slave_dispatches_the_appends_of_a_moment_together(tmp_path, monkeypatch):
    """Under single sends each append is a frame of its own; a slave that dispatched each
    one after its ACK spent ~a fifth of its CPU on a plan, a consume-queue write, an index
    write and the listeners for one record. The appends of a moment share one dispatch,
    after their ACKs; the link's end dispatches what waits at once."""
    # Neither the spacing nor the tail's timer passes within the test.
    monkeypatch.setattr(ha.slave, "DISPATCH_SPACING_S", 60.0)
    monkeypatch.setattr(ha.slave, "DISPATCH_TAIL_S", 60.0)
    appends, end = small_frames(tmp_path, 10)
    acks: list[int] = []

    async def master_of_one_frame_at_a_time(reader, writer) -> None:
        macs = await speak_master(reader, writer)
        await read_sealed_control(reader, macs.incoming, Kind.START)
        for offset, records in appends:  # each one acknowledged before the next leaves
            writer.write(data_frame(macs.outgoing, offset, 1, 0, 0, records))
            await writer.drain()
            while not acks or acks[-1] < offset + len(records):
                kind, payload = await read_sealed(reader, macs.incoming)
                assert kind is Kind.ACK
                acks.append(ACK.unpack(payload)[0])
        assert dispatches == [], dispatches  # every one acknowledged, none dispatched yet
        assert slave.store.consume_queues.get("orders", 0) is None
        writer.close()

    async def run() -> None:
        async with fake_master(master_of_one_frame_at_a_time) as address:
            with pytest.raises(LinkError, match="link closed"):
                await asyncio.wait_for(slave._follow(address), TIMEOUT_S)

    with lone_slave(tmp_path) as slave:
        dispatches = counted_dispatches(slave, monkeypatch)
        asyncio.run(run())
        assert acks[-1] == end
        assert dispatches == [end]  # once, at the link's end
        assert slave.store.consume_queues.get("orders", 0).max_offset == len(appends)


def test_a_slave_dispatches_at_once_when_much_waits_and_a_failed_dispatch_ends_the_link(
    tmp_path, monkeypatch
):
    """Past ``DISPATCH_AT_ONCE_BYTES`` waiting, an append is dispatched at once (a link
    catching up after a restart dispatches as it reads); a dispatch that fails (a full
    disk) ends the link with its error, and the node dials again."""
    monkeypatch.setattr(ha.slave, "DISPATCH_SPACING_S", 60.0)
    monkeypatch.setattr(ha.slave, "DISPATCH_TAIL_S", 60.0)
    monkeypatch.setattr(ha.slave, "DISPATCH_AT_ONCE_BYTES", 1)
    appends, _ = small_frames(tmp_path, 3)

    async def master(reader, writer) -> None:
        macs = await speak_master(reader, writer)
        await read_sealed_control(reader, macs.incoming, Kind.START)
        with contextlib.suppress(LinkError):
            for offset, records in appends:  # each one acknowledged before the next leaves
                writer.write(data_frame(macs.outgoing, offset, 1, 0, 0, records))
                await writer.drain()
                while ACK.unpack((await read_sealed(reader, macs.incoming))[1])[0] <= offset:
                    pass
            while True:
                await read_sealed(reader, macs.incoming)

    async def run() -> None:
        async with fake_master(master) as address:
            with pytest.raises(DiskFullError, match="injected"):
                await asyncio.wait_for(slave._follow(address), TIMEOUT_S)

    with lone_slave(tmp_path) as slave:
        dispatches = counted_dispatches(slave, monkeypatch)
        dispatch = slave.store.dispatch_replicated

        def full_after_two() -> None:
            dispatch()
            if len(dispatches) == 2:
                raise DiskFullError("injected: no space left for a consume-queue file")

        monkeypatch.setattr(slave.store, "dispatch_replicated", full_after_two)
        asyncio.run(run())
        assert dispatches == [appends[1][0], appends[2][0]]  # each append's end, at once


def frames_of_appends(
    source: MessageStore, appends: list[tuple[int, int]]
) -> list[tuple[int, bytes]]:
    """What a master pushes for each append ``(start, end)``: its records, cut at segment
    ends (a DATA frame holds records of one segment)."""
    frames = []
    for start, end in appends:
        while start < end:
            records = source.commitlog.read_records(start, end - start)
            frames.append((start, records))
            start += len(records)
    return frames


@pytest.mark.parametrize("lane", ["thread", "c", "twin"])
def test_a_slave_takes_common_frames_in_the_lane_and_the_rest_through_python(
    tmp_path, monkeypatch, lane
):
    """The replica lane (ha/replica_lane.py) appends the frames that continue the log; the
    first frame of an epoch and of a segment are declined and appended by the Python path
    (a new epoch recorded, the log rolled to its next file). Either way the slave's log is
    the master's byte for byte, and every frame is acknowledged. ``thread``: the link's
    socket is lent to the lane's thread (ha/link_thread.py), and lent again once the
    Python path took what it declined and read with it; ``c``: the lane in the loop's
    callback, as a SYNC_FLUSH slave follows; ``twin``: the lane's Python twin takes the
    frames, as on a host where libcrypto cannot be opened."""
    if lane == "twin":
        monkeypatch.setattr(ha.replica_lane, "native", None)
    if lane == "c":
        monkeypatch.setattr(ha.link_thread, "usable", lambda macs: False)
    by_thread: list[int] = []  # the frames each run of the thread took
    stop_thread = ha.link_thread.LinkThread.stop

    def counted_stop(self):
        before = self._macs.incoming.sequence
        ended = stop_thread(self)
        if ended is not None:
            by_thread.append(self._macs.incoming.sequence - before)
        return ended

    monkeypatch.setattr(ha.link_thread.LinkThread, "stop", counted_stop)
    config = {"commitlog_segment_bytes": 40_960, "max_message_body_bytes": 2048}
    source = MessageStore.open(StoreConfig(data_dir=str(tmp_path / "source"), **config))
    appends = []
    for i in range(100):
        start = source.commitlog.write_offset
        assert source.put_messages([Message("orders", b"body-%03d" % i * 150)]).ok
        appends.append((start, source.commitlog.write_offset))
    frames, end = frames_of_appends(source, appends), source.commitlog.write_offset
    log = log_bytes(source)
    source.shutdown()
    new_epoch_at = appends[40][0]
    by_python: list[int] = []
    python_path = ReplicationSlave._append_data

    def counted(self, kind, payload):
        by_python.append(DATA_HEADER.unpack_from(payload)[0])
        return python_path(self, kind, payload)

    monkeypatch.setattr(ReplicationSlave, "_append_data", counted)
    acks: list[int] = []

    async def master_of_two_epochs(reader, writer) -> None:
        macs = await speak_master(reader, writer)
        await read_sealed_control(reader, macs.incoming, Kind.START)
        for offset, records in frames:
            epoch = 1 if offset < new_epoch_at else 2
            start = 0 if epoch == 1 else new_epoch_at
            writer.write(data_frame(macs.outgoing, offset, epoch, start, 0, records))
            if offset % 3 == 0:
                await writer.drain()  # frames arrive alone and several together
        await writer.drain()
        while not acks or acks[-1] < end:
            kind, payload = await read_sealed(reader, macs.incoming)
            assert kind is Kind.ACK
            acks.append(ACK.unpack(payload)[0])
        writer.close()

    async def run() -> None:
        store = MessageStore.open(StoreConfig(data_dir=str(tmp_path / "slave"), **config))
        slave = ReplicationSlave(
            store, EpochHistory(str(tmp_path / "slave")), "slave-1", SECRET, lambda: None
        )
        try:
            async with fake_master(master_of_two_epochs) as address:
                with pytest.raises(LinkError, match="link closed"):
                    await asyncio.wait_for(slave._follow(address), TIMEOUT_S)
            assert log_bytes(store) == log
            assert acks[-1] == end and acks == sorted(acks)
            assert slave.epochs.entries == [EpochEntry(1, 0), EpochEntry(2, new_epoch_at)]
            segment_starts = {o for o, _ in frames if o % 40_960 == 0 and o > 0}
            assert len(segment_starts) >= 3, "the log rolls to new segments"
            assert set(by_python) == {0, new_epoch_at} | segment_starts
            if lane == "thread":  # lent again after the Python path took what it declined
                assert len(by_thread) >= 2 and sum(by_thread) > 0
            else:
                assert by_thread == []
        finally:
            store.shutdown()

    asyncio.run(run())
