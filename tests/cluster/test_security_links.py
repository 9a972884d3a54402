"""Internal links need the cluster secret: a replica with the wrong one is refused by the
master (and logged), a slave does not follow a "master" that cannot prove the secret, and
a node with the wrong secret cannot join Raft. The Raft port refuses a huge announced
message before buffering it; replication, Raft and metrics listen on their own hosts; and
/metrics can require a bearer token. (The replication protocol against a man in the
middle: tests/ha/test_replication_link.py.)"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import struct
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ferrymq.client import Admin
from ferrymq.launcher.polling import until
from ferrymq.launcher.processes import process_tree
from ha.epochs import EpochHistory
from ha.link_auth import Handshake, Role, new_nonce, proof, session_macs
from ha.slave import ReplicationSlave
from ha.wire import PROTOCOL_VERSION, Kind, LinkError, control, read_plain, sealed_control
from node.port_holds import hold_free_ports, port_of
from routing.commands import RegisterNode
from routing.raft_transport import MAX_COMMAND_BYTES
from routing.replica import CommandTooLarge, RoutingReplica
from store.config import StoreConfig
from store.message_store import MessageStore
from tests.support import ROOT
from tests.support.nodes import TEST_STORE, start_node

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


def listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket of node ``pid`` (its routing host's included:
    Raft listens there) in LISTEN state; an IPv4-mapped IPv6 address (gRPC listens on
    those) as its IPv4 address."""
    inodes = set()
    for each in process_tree(pid):
        for fd in os.listdir(f"/proc/{each}/fd"):
            try:
                target = os.readlink(f"/proc/{each}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    found = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}", encoding="ascii") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                    continue
                address, port = fields[1].split(":")
                raw = b"".join(
                    struct.pack("<I", int(address[i : i + 8], 16))
                    for i in range(0, len(address), 8)
                )
                ip = ipaddress.ip_address(raw)
                if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
                    ip = ip.ipv4_mapped
                found.add((str(ip), int(port, 16)))
    return found


def start_voter(directory: Path, node_toml: str, peer_host: str) -> tuple:
    """A one-voter cluster whose Raft and replication ports are fixed: (node, raft, ha).
    The ports are held on ``peer_host``, where the node binds them: a hold guards only its
    own address, so one on 127.0.0.1 leaves the port free for a port-0 bind on 127.0.0.2,
    and pysyncobj then retries its Raft bind until the node gives up joining."""
    holds = hold_free_ports(peer_host, 2)
    raft, ha = (port_of(held) for held in holds)
    node = start_node(
        str(directory / "node"),
        node_toml + f"[ports]\nraft = {raft}\nreplication = {ha}\nmetrics = 0\n"
        f'[cluster]\nvoters = ["{peer_host}:{raft}"]\nsecret = "{SECRET}"\n',
        holds=holds,
    )
    return node, raft, ha


def assert_listening(found: set[tuple[str, int]], expected: set[tuple[str, int]]) -> None:
    """``found`` is ``expected`` and one loopback listener more: the gRPC server behind the
    client port's relay (TLS and plaintext on one port, ``node/client_port.py``)."""
    extra = found - expected
    assert expected <= found and len(extra) == 1, (found, expected)
    assert next(iter(extra))[0] == "127.0.0.1", extra


def test_internal_listeners_bind_their_own_hosts(tmp_path):
    """By default replication and Raft listen on the node's host (Raft never on every
    interface) and /metrics on loopback only; internal_host and [metrics] host move them.
    The remoting port, a client port like gRPC's, listens on the node's host; the gRPC
    server behind the client port's relay (TLS and plaintext on one port) on loopback."""
    node, raft, ha = start_voter(tmp_path / "default", '[node]\nhost = "127.0.0.2"\n', "127.0.0.2")
    try:
        grpc_port = int(node.address.rpartition(":")[2])
        metrics_port = int(node.metrics.rpartition(":")[2])
        assert node.remoting.startswith("127.0.0.2:")
        expected = {
            ("127.0.0.2", grpc_port),
            ("127.0.0.2", int(node.remoting.rpartition(":")[2])),
            ("127.0.0.2", ha),
            ("127.0.0.2", raft),
            ("127.0.0.1", metrics_port),
        }
        assert_listening(listening(node.process.pid), expected)
    finally:
        node.sigterm()
    node, raft, ha = start_voter(
        tmp_path / "split",
        '[node]\nhost = "127.0.0.1"\ninternal_host = "127.0.0.2"\n[metrics]\nhost = "127.0.0.3"\n',
        "127.0.0.2",
    )
    try:
        grpc_port = int(node.address.rpartition(":")[2])
        assert node.metrics.startswith("127.0.0.3:")
        expected = {
            ("127.0.0.1", grpc_port),
            ("127.0.0.1", int(node.remoting.rpartition(":")[2])),
            ("127.0.0.2", ha),
            ("127.0.0.2", raft),
            ("127.0.0.3", int(node.metrics.rpartition(":")[2])),
        }
        assert_listening(listening(node.process.pid), expected)
        with Admin(node.address) as admin:  # and it works: routing, replication role
            admin.create_topic("split", 1)
    finally:
        node.sigterm()


def test_metrics_needs_the_bearer_token_when_one_is_set(tmp_path):
    token = "a-metrics-token-for-the-tests"
    node = start_node(
        str(tmp_path / "node"), f'[ports]\nmetrics = 0\n[metrics]\nbearer_token = "{token}"\n'
    )
    try:

        def scrape(authorization: str | None) -> int:
            request = urllib.request.Request(f"http://{node.metrics}/metrics")
            if authorization is not None:
                request.add_header("Authorization", authorization)
            try:
                with urllib.request.urlopen(request, timeout=5) as answer:
                    assert b"ferrymq_node_info" in answer.read()
                    return answer.status
            except urllib.error.HTTPError as error:
                if error.code == 401:
                    assert error.headers["WWW-Authenticate"].startswith("Bearer")
                    assert b"ferrymq" not in error.read()
                return error.code

        assert scrape(None) == 401
        assert scrape(f"Bearer {token}x") == 401
        assert scrape(f"Basic {token}") == 401
        assert scrape(f"Bearer {token}") == 200
    finally:
        node.sigterm()
