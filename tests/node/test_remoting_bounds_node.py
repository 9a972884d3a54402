"""The node's ``[remoting]`` settings (node/config.py): safe defaults, strict checks, the
transport limits they set, and a real node that applies them (the bounds themselves, on
an in-process listener: ``test_remoting_bounds.py``)."""

from __future__ import annotations

import contextlib
import os
import socket
import time

import pytest

from ferrymq.client import Admin, Message, Producer
from ferrymq.codec.remoting_codes import ResponseCode
from ferrymq.launcher.polling import until
from node.config import ConfigError, RemotingOptions, parse_node_config, render_node_config
from node.remoting.connection import TransportLimits
from node.remoting.server import transport_limits
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient

UNKNOWN_CODE = 4321  # answered REQUEST_CODE_NOT_SUPPORTED: a whole, valid frame


def test_the_defaults_bound_the_port_and_match_the_transports():
    options = parse_node_config("").remoting
    assert options == RemotingOptions()
    assert (options.idle_timeout_ms, options.first_frame_timeout_ms) == (120_000, 10_000)
    assert options.max_connections == TransportLimits().max_connections == 10_000
    limits = transport_limits(options)
    assert limits == TransportLimits()  # the listener's own defaults are the node's


def test_settings_are_read_rendered_and_mapped_to_the_transport():
    text = (
        "[remoting]\nmax_connections = 500\nmax_connections_per_address = 50\n"
        "idle_timeout_ms = 1500\nfirst_frame_timeout_ms = 250\n"
        "[messages]\nmax_request_bytes_per_connection = 33554432\n"
        "max_request_bytes = 134217728\n"
    )
    config = parse_node_config(text)
    rendered = parse_node_config(render_node_config(config))
    assert (rendered.remoting, rendered.messages) == (config.remoting, config.messages)
    assert "[remoting]" in render_node_config(parse_node_config(""))
    limits = transport_limits(config.remoting)
    assert (limits.max_connections, limits.max_connections_per_address) == (500, 50)
    assert (limits.idle_timeout_s, limits.first_frame_timeout_s) == (1.5, 0.25)
    # The request bytes are the node's, both doors': [messages], one budget.
    messages = config.messages
    assert messages.max_request_bytes_per_connection == 32 << 20
    assert messages.max_request_bytes == 128 << 20


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        ("max_connections = 0", "remoting.max_connections must be a positive integer"),
        ("idle_timeout_ms = true", "remoting.idle_timeout_ms must be a positive integer"),
        ("first_frame_timeout_ms = 1.5", "must be a positive integer"),
        ("max_connection = 5", r"unknown option\(s\) in \[remoting\]: max_connection"),
        (
            "max_connections = 10\nmax_connections_per_address = 11",
            "max_connections_per_address .* at most max_connections",
        ),
        ("[messages]\nmax_request_bytes = 1048576", "at least 67108864"),
        (
            "[messages]\nmax_request_bytes_per_connection = 1073741824",
            "max_request_bytes_per_connection .* at most max_request_bytes",
        ),
    ],
)
def test_bad_settings_are_refused_naming_them(lines, words):
    section = "" if lines.startswith("[") else "[remoting]\n"
    with pytest.raises(ConfigError, match=words):
        parse_node_config(f"{section}{lines}\n")


def test_a_node_applies_its_remoting_settings(tmp_path):
    data_dir = str(tmp_path / "node")
    node = start_node(
        data_dir,
        "[ports]\nremoting = 0\n[remoting]\nmax_connections_per_address = 3\n"
        "idle_timeout_ms = 3000\nfirst_frame_timeout_ms = 1000\n",
    )
    try:
        with contextlib.ExitStack() as stack:
            clients = [
                stack.enter_context(RemotingClient(node.remoting, timeout_s=10)) for _ in range(3)
            ]
            for client in clients:
                assert client.call(UNKNOWN_CODE).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            answered = time.monotonic()
            with RemotingClient(node.remoting, timeout_s=10) as fourth:
                assert fourth.closed_by_peer(), "a fourth connection from 127.0.0.1 was kept"
            assert clients[0].closed_by_peer(), "an idle connection was kept"
            assert time.monotonic() - answered >= 2.5
        with RemotingClient(node.remoting, timeout_s=10) as silent:
            started = time.monotonic()
            assert silent.closed_by_peer(), "a connection that sent nothing was kept"
            assert time.monotonic() - started < 5
        with open(os.path.join(data_dir, "node.toml"), encoding="utf-8") as f:
            effective = parse_node_config(f.read())
        assert effective.remoting.max_connections_per_address == 3
        with open(node.log_path, encoding="utf-8", errors="replace") as f:
            log = f.read()
        assert "max_connections_per_address" in log
    finally:
        node.sigterm()


def test_the_sdk_sends_again_after_the_node_closed_its_idle_connection(tmp_path):
    """The idle timeout closes an SDK producer's connection between two sends; the next
    send, without retries, must find that out before it writes (it failed UNAVAILABLE:
    the node closed the connection)."""
    node = start_node(
        str(tmp_path / "node"), "[ports]\nremoting = 0\n[remoting]\nidle_timeout_ms = 1000\n"
    )
    try:
        with Admin(node.address) as admin:
            admin.create_topic("idle", queue_count=1)
        with Producer(node.address, max_attempts=1) as producer:
            producer.send(Message("idle", b"before"))
            (sock,) = [c._socket for c in producer.endpoints._channels.values() if c._socket]
            until(lambda: _closed_by_node(sock), what="the node to close the idle connection")
            assert producer.send(Message("idle", b"after")).message_id
    finally:
        node.sigterm()


def _closed_by_node(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True
