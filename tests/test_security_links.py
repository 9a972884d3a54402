"""Internal links need the cluster secret: a replica with the wrong one is refused by the
master (and logged), a slave does not follow a "master" that cannot prove the secret, and
a node with the wrong secret cannot join Raft, and the Raft port refuses a huge announced
message before buffering it. (The replication protocol against a man in the middle:
tests/test_replication_link.py.)"""

from __future__ import annotations

import asyncio
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from ferrymq.client import Admin
from ferrymq.polling import until
from ferrymq.port_holds import hold_free_ports, port_of
from ha.epochs import EpochHistory
from ha.link_auth import Handshake, Role, new_nonce, proof, session_macs
from ha.slave import ReplicationSlave
from ha.wire import PROTOCOL_VERSION, Kind, LinkError, control, read_plain, sealed_control
from routing.commands import RegisterNode
from routing.raft_transport import MAX_COMMAND_BYTES
from routing.replica import CommandTooLarge, RoutingReplica
from store.config import StoreConfig
from store.message_store import MessageStore
from tests.node_process import ROOT, TEST_STORE, start_node

SECRET = "the-real-cluster-secret"


@pytest.fixture(scope="module")
def voter(tmp_path_factory):
    """A one-voter cluster (so its replication and Raft ports are fixed and known)."""
    directory = tmp_path_factory.mktemp("links")
    holds = hold_free_ports("127.0.0.1", 2)
    raft, ha = (port_of(held) for held in holds)
    log_path = directory / "voter.log"
    node = start_node(
        str(directory / "voter"),
        f'[ports]\nraft = {raft}\nreplication = {ha}\n[cluster]\nvoters = ["127.0.0.1:{raft}"]\n'
        f'secret = "{SECRET}"\njoin_timeout_ms = 20000\n',
        log_path=str(log_path),
        holds=holds,
    )
    try:
        yield {"node": node, "raft": raft, "ha": ha, "log": log_path, "dir": directory}
    finally:
        node.sigterm()


def test_the_master_refuses_and_logs_a_replica_with_the_wrong_secret(voter):
    async def handshake(secret: str) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", voter["ha"])
        try:
            challenge = await read_plain(reader, Kind.CHALLENGE)
            exchange = Handshake(challenge["group"], "intruder", challenge["nonce"], new_nonce())
            writer.write(
                control(
                    Kind.HELLO,
                    version=PROTOCOL_VERSION,
                    node_id="intruder",
                    nonce=exchange.slave_nonce,
                    proof=proof(secret, Role.SLAVE, exchange),
                )
            )
            await writer.drain()
            with pytest.raises(LinkError, match="refused") as refused:
                await read_plain(reader, Kind.WELCOME)
            return str(refused.value)
        finally:
            writer.close()

    assert "wrong cluster secret" in asyncio.run(handshake("not-the-cluster-secret"))
    until(
        lambda: "replication: refused intruder (wrong cluster secret)" in voter["log"].read_text(),
        what="the refusal in the log",
    )
    # The right secret passes the secret check (and is refused only as a non-member).
    assert "not a member" in asyncio.run(handshake(SECRET))


def test_a_slave_does_not_follow_a_master_that_cannot_prove_the_secret(tmp_path):
    store = MessageStore.open(
        StoreConfig(
            data_dir=str(tmp_path / "slave"),
            commitlog_segment_bytes=8 << 20,
            consume_queue_entries_per_file=10_000,
            index_slot_count=10_007,
            index_entry_count=40_000,
        )
    )

    async def fake_master(reader, writer) -> None:
        nonce = new_nonce()
        writer.write(control(Kind.CHALLENGE, version=PROTOCOL_VERSION, nonce=nonce, group="g"))
        await writer.drain()
        hello = await read_plain(reader, Kind.HELLO)
        # An impostor (another secret) offers an empty log: a slave that believed it would
        # truncate.
        exchange = Handshake("g", hello["node_id"], nonce, hello["nonce"])
        macs = session_macs("an-impostor's-secret", exchange, Role.MASTER)
        writer.write(
            sealed_control(
                macs.outgoing,
                Kind.WELCOME,
                proof=proof("an-impostor's-secret", Role.MASTER, exchange),
                max_offset=0,
                min_offset=0,
            )
        )
        writer.write(sealed_control(macs.outgoing, Kind.EPOCHS, epochs=[]))
        await writer.drain()
        await reader.read()  # until the slave hangs up
        writer.close()

    async def follow() -> None:
        server = await asyncio.start_server(fake_master, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        slave = ReplicationSlave(
            store, EpochHistory(str(tmp_path / "slave")), "slave-1", SECRET, lambda: None
        )
        async with server:
            with pytest.raises(LinkError, match="did not prove"):
                await slave._follow(f"127.0.0.1:{port}")

    try:
        asyncio.run(follow())
    finally:
        store.shutdown()


def test_a_node_with_the_wrong_secret_cannot_join_raft(voter):
    directory: Path = voter["dir"]
    config = directory / "intruder.toml"
    config.write_text(
        TEST_STORE
        + f'[node]\nid = "intruder"\n[ports]\ngrpc = 0\nmetrics = 0\nraft = 0\nreplication = 0\n'
        f'[cluster]\nvoters = ["127.0.0.1:{voter["raft"]}"]\nsecret = "not-the-cluster-secret"\n'
        "join_timeout_ms = 3000\n"
    )
    completed = subprocess.run(
        [sys.executable, "-m", "node", "--config", str(config), "--data", str(directory / "i")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode != 0
    assert "is the cluster secret the same on every node?" in completed.stderr


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def send_until_dropped(port: int, length: int, junk_bytes: int) -> bool:
    """Announce a Raft message of ``length`` bytes, then send junk: whether the node hung
    up before ``junk_bytes`` were sent (and then, within 5 s, the rest went nowhere)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        chunk = b"\xa5" * 65536
        try:
            sock.sendall(struct.pack("i", length))
            for _ in range(junk_bytes // len(chunk)):
                sock.sendall(chunk)
            return sock.recv(1) == b""  # sent it all: closed only if it hangs up now
        except (BrokenPipeError, ConnectionResetError):
            return True
        except TimeoutError:
            return False


def test_the_raft_port_drops_a_huge_announced_message_before_buffering_it(voter):
    """pysyncobj would buffer up to 2 GiB of junk before decrypting any of it; the node
    drops the connection at the length prefix, its memory does not grow by what was
    sent, and it keeps serving."""
    pid = voter["node"].process.pid
    before = rss_bytes(pid)
    junk = 64 << 20
    assert send_until_dropped(voter["raft"], 2**31 - 1, junk)
    # Under the post-authentication bound but over the one before it: dropped too.
    assert send_until_dropped(voter["raft"], 100 << 10, 1 << 20)
    assert send_until_dropped(voter["raft"], -1, 1 << 20)  # pysyncobj reads a signed length
    assert rss_bytes(pid) - before < junk // 4
    until(
        lambda: "announcing a message of 2147483647 bytes" in voter["log"].read_text(),
        what="the refusal in the log",
    )
    with Admin(voter["node"].address) as admin:
        admin.create_topic("after-the-attack", 1)
        assert "after-the-attack" in [t.name for t in admin.list_topics()]


def test_a_routing_command_too_large_for_a_raft_message_is_refused_before_it_is_appended(
    tmp_path,
):
    """The bound on a Raft message assumes no command pickles to more than
    MAX_COMMAND_BYTES: a larger one would be dropped by every peer, for ever."""
    (held,) = hold_free_ports("127.0.0.1", 1)
    address = f"127.0.0.1:{port_of(held)}"
    replica = RoutingReplica(
        self_address=address, voters=[address], secret=SECRET, data_dir=str(tmp_path), lease_s=3
    )
    try:
        huge = RegisterNode("n" * MAX_COMMAND_BYTES, "group-1", "127.0.0.1:1")
        with pytest.raises(CommandTooLarge, match="over the 262144-byte limit"):
            asyncio.run(replica.submit(huge))
        assert replica.status().commit_index <= 1  # nothing but the leader's no-op
    finally:
        replica.close()
        held.close()
