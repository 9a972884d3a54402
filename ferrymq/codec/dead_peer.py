"""A connection's kernel, asked to notice a peer that is gone: for the nodes' replication
links (``ha/wire.py``), a node's forwarding connections and the SDK's remoting channels.

A peer whose *network or machine* is gone stops answering at the TCP level: data sent is
never acknowledged, keepalive probes are never answered. A peer *process* that is busy or
stopped still has a kernel that acknowledges and answers. So the kernel's own timeouts tell
a cut link from a slow peer, which no application-level silence timeout can.
"""

from __future__ import annotations

import contextlib
import socket

# The kernel gives up on a connection whose peer's TCP has not answered for this long.
DEAD_LINK_S = 2


def detect_dead_peer(sock: socket.socket | None) -> None:
    """Let the kernel end this connection once the peer's TCP stops answering for about
    ``DEAD_LINK_S``: unacknowledged data (``TCP_USER_TIMEOUT``), or keepalive probes
    after a second of silence on an idle connection. Best effort: a socket without these
    options (not TCP, another OS) keeps the application's silence timeouts alone."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    options = [
        (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPIDLE", None), 1),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPINTVL", None), 1),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPCNT", None), DEAD_LINK_S - 1),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_USER_TIMEOUT", None), DEAD_LINK_S * 1000),
    ]
    for level, option, value in options:
        if option is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(level, option, value)
