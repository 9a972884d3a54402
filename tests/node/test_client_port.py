"""TLS and plaintext on one client port (``node/client_port.py``, ``[security]
client_tls``): a node with no TLS settings serves both on its gRPC and remoting ports with
a certificate it made and keeps; a relayed gRPC call still knows its client; the strict
modes refuse the other kind."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import socket
import ssl

import grpc
import pytest
import uvloop

from ferrymq.client import Admin, ClientSecurity, FerryError
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from node.client_port import (
    GrpcRelay,
    SniffingListener,
    certificate_files,
    client_peer,
    grpc_peer,
    take_over,
    waiting_at_most,
)
from node.config import ConfigError, parse_node_config
from node.tls import ClientTls, grpc_relay_ssl_context
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient
from tests.support.tls_certs import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def trusting(cert: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=cert)
    context.check_hostname = False
    return context


def test_a_default_node_speaks_tls_and_plaintext_on_each_client_port(tmp_path):
    data = tmp_path / "node"
    node = start_node(str(data))
    cert = data / "tls" / "node-cert.pem"
    try:
        assert cert.exists() and (data / "tls" / "node-key.pem").stat().st_mode & 0o077 == 0
        with Admin(node.address) as plaintext:
            plaintext.create_topic("both", 1)
        with Admin(node.address, security=ClientSecurity(tls_ca=str(cert))) as over_tls:
            assert "both" in {t.name for t in over_tls.list_topics()}
        for context in (None, trusting(str(cert))):
            with RemotingClient(node.remoting, ssl_context=context) as client:
                answer = client.call(RequestCode.GET_BROKER_CLUSTER_INFO)
                assert answer.code == ResponseCode.SUCCESS, answer
        made = cert.read_bytes()
    finally:
        node.stop()
    port = int(node.address.rpartition(":")[2])
    again = start_node(str(data), port=port)
    try:
        assert cert.read_bytes() == made  # the same certificate after a restart
        with Admin(again.address, security=ClientSecurity(tls_ca=str(cert))) as over_tls:
            assert "both" in {t.name for t in over_tls.list_topics()}
    finally:
        again.stop()


def test_client_tls_off_speaks_plaintext_only(tmp_path):
    node = start_node(str(tmp_path / "node"), '[security]\nclient_tls = "off"\n')
    try:
        assert not (tmp_path / "node" / "tls").exists()
        with Admin(node.address) as plaintext:
            plaintext.list_topics()
        with pytest.raises(OSError), RemotingClient(node.remoting, ssl_context=trusting_none()):
            pass
    finally:
        node.stop()


def trusting_none() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def test_client_tls_settings_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="optional, required or off"):
        parse_node_config('[security]\nclient_tls = "maybe"\n')
    with pytest.raises(ConfigError, match="required needs tls_cert"):
        parse_node_config('[security]\nclient_tls = "required"\n')
    with pytest.raises(ConfigError, match="off leaves tls_cert"):
        parse_node_config('[security]\nclient_tls = "off"\ntls_cert = "c.pem"\ntls_key = "k.pem"\n')
    assert parse_node_config("").security.client_tls_mode == "optional"
    configured = parse_node_config('[security]\ntls_cert = "c.pem"\ntls_key = "k.pem"\n')
    assert configured.security.client_tls_mode == "required"


def test_a_relayed_call_knows_its_client_and_each_connection_is_its_own(tmp_path):
    """In one process: a gRPC server behind the relay answers each call with the client
    the relay names for it; plaintext and TLS calls each come from their own connection."""
    cert, key = certificate_files(str(tmp_path), "n1", "127.0.0.1")

    async def scenario() -> tuple[list[str], list[str]]:
        def whoami(request: bytes, context) -> bytes:
            return client_peer(context.peer()).encode()

        server = grpc.aio.server()
        handler = grpc.method_handlers_generic_handler(
            "t.T", {"Who": grpc.unary_unary_rpc_method_handler(whoami)}
        )
        server.add_generic_rpc_handlers((handler,))
        backend = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        relay = GrpcRelay(backend, grpc_relay_ssl_context(ClientTls("optional", cert, key)), 5)
        clients: list[str] = []

        async def accepted(connection, speaks_tls: bool) -> None:
            clients.append(grpc_peer(connection.getpeername()))
            await relay.accepted(connection, speaks_tls)

        front = SniffingListener(accepted, 5, waiting_at_most(16, 16))
        port = front.bind("127.0.0.1", 0)
        front.serve()
        with open(cert, "rb") as pem:
            credentials = grpc.ssl_channel_credentials(pem.read())
        answers = []
        for channel in (
            grpc.aio.insecure_channel(f"127.0.0.1:{port}"),
            grpc.aio.secure_channel(f"localhost:{port}", credentials),
        ):
            async with channel:
                who = channel.unary_unary("/t.T/Who")
                answers.append((await who(b"")).decode())
                assert (await who(b"")).decode() == answers[-1]  # one connection, one peer
        await front.close()
        await server.stop(0)
        return answers, clients

    answers, clients = asyncio.run(scenario())
    assert answers == clients and len(set(answers)) == 2, (answers, clients)


def test_a_silent_connection_is_closed_after_the_first_byte_timeout():
    async def scenario() -> bytes:
        taken = []

        async def accepted(connection, speaks_tls: bool) -> None:
            taken.append(connection)

        front = SniffingListener(accepted, 0.3, waiting_at_most(16, 16))
        port = front.bind("127.0.0.1", 0)
        front.serve()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        ended = await asyncio.wait_for(reader.read(), 5)  # EOF once the listener gives up
        writer.close()
        await front.close()
        assert taken == []
        return ended

    assert asyncio.run(scenario()) == b""


class _OpensAFileWhenCollected:
    """In a garbage cycle: its finalizer opens a file, taking the lowest free number, as
    another thread's open can between two closes of one descriptor."""

    opened: int | None = None

    def __del__(self) -> None:
        _OpensAFileWhenCollected.opened = os.open(os.devnull, os.O_RDONLY)


def test_a_taken_over_connection_collected_unclosed_closes_its_descriptor_once():
    """Under uvloop, a transport whose reading is paused holds no reference to itself: if it
    becomes garbage unclosed, the collector frees it, and its descriptor must be closed by
    one owner. Before, the socket object's finalizer closed it and the transport's
    ``uv_close`` closed the same number again, then another file's (the chaos runs' EBADF
    in the store's flusher)."""

    async def scenario() -> bool:
        loop = asyncio.get_running_loop()
        with socket.socket() as server, socket.socket() as client:
            server.bind(("127.0.0.1", 0))
            server.listen()
            client.connect(server.getsockname())
            connection, _ = server.accept()

            class Held(asyncio.Protocol):
                def connection_made(self, transport) -> None:
                    self.transport = transport

            transport, held = await take_over(loop, Held, connection)
            transport.pause_reading()
            held.finalizer = _OpensAFileWhenCollected()  # in the cycle, after the socket
            del transport, held, connection
            gc.collect()
            await asyncio.sleep(0.05)  # libuv's close callbacks
            opened = _OpensAFileWhenCollected.opened
            try:
                os.fstat(opened)
            except OSError:
                return False
            os.close(opened)
            return True

    with pytest.warns(ResourceWarning):  # the transport says it was dropped unclosed
        assert uvloop.run(scenario()), "a descriptor opened meanwhile was closed under it"


def test_the_sdk_over_tls_to_a_node_that_requires_it_and_plaintext_refused(tmp_path, pki):
    node = start_node(
        str(tmp_path / "node"),
        f'[security]\ntls_cert = "{pki.server_cert}"\ntls_key = "{pki.server_key}"\n',
    )
    try:
        with Admin(node.address, security=ClientSecurity(tls_ca=pki.ca)) as over_tls:
            over_tls.list_topics()
        with pytest.raises(FerryError), Admin(node.address, timeout_s=3) as plaintext:
            plaintext.list_topics()
    finally:
        node.stop()


def test_a_bad_tls_handshake_is_dropped_quietly_and_the_port_serves_on(tmp_path, caplog):
    """Garbage after a TLS record's first byte (a scanner, a confused client): closed,
    nothing logged above DEBUG, and the next connection is served."""
    cert, key = certificate_files(str(tmp_path), "n1", "127.0.0.1")

    async def scenario() -> tuple[bytes, bytes]:
        async def echo(reader, writer) -> None:
            writer.write(await reader.read(5))
            await writer.drain()
            writer.close()

        backend = await asyncio.start_server(echo, "127.0.0.1", 0)
        relay = GrpcRelay(
            backend.sockets[0].getsockname()[1],
            grpc_relay_ssl_context(ClientTls("optional", cert, key)),
            5,
        )
        front = SniffingListener(relay.accepted, 5, waiting_at_most(16, 16))
        port = front.bind("127.0.0.1", 0)
        front.serve()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\x16\x03\x01\x00\x05garbage-not-a-client-hello")
        refused = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"hello")
        served = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        await front.close()
        backend.close()
        return refused, served

    with caplog.at_level(logging.INFO):
        refused, served = asyncio.run(scenario())
    assert served == b"hello"
    assert b"hello" not in refused
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
