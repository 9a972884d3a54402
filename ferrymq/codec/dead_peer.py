"""A connection's kernel, asked to notice a peer that is gone: for the nodes' replication
links (``ha/wire.py``), a node's forwarding connections and the SDK's remoting channels.

A peer whose *network or machine* is gone stops answering at the TCP level: data sent is
never acknowledged, keepalive probes are never answered. A peer *process* that is busy or
stopped still has a kernel that acknowledges and answers, with one exception: when it
stops reading, its receive window closes, and Linux (6.18 here, measured) ends a
connection whose peer's window stayed closed past ``TCP_USER_TIMEOUT`` although every
probe is answered.
So the side that sends the bulk of a connection's bytes (a master to its slaves, a node
forwarding its clients' sends to its master) allows a closed window ``SLOW_PEER_S``: a
starved peer is slow, and the application's own rules (the replication backlog, a
forwarded request's deadline) decide what that costs. A side that sends only small
frames, one or a few at a time (a slave's acks, an SDK client's requests), does not fill
a window in ``DEAD_LINK_S`` and keeps that for data too: a client learns of a cut path in
~2 s and goes to another node.
"""

from __future__ import annotations

import contextlib
import socket

# The kernel gives up on a connection whose peer's TCP has not answered for this long.
DEAD_LINK_S = 2
# How long a sender allows its peer's window to stay closed (or its data unanswered).
SLOW_PEER_S = 10


def detect_dead_peer(sock: socket.socket | None, unanswered_s: float = DEAD_LINK_S) -> None:
    """Let the kernel end this connection once the peer's TCP has not answered for
    ``unanswered_s``: data unacknowledged or held back by a closed window
    (``TCP_USER_TIMEOUT``), or, on an idle connection, keepalive probes sent every second
    after a second of silence (with a user timeout set, Linux counts the keepalive's
    silence against it too, not the probes). Best effort: a socket without these options
    (not TCP, another OS) keeps the application's silence timeouts alone."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    options = [
        (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPIDLE", None), 1),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPINTVL", None), 1),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPCNT", None), DEAD_LINK_S - 1),
        (socket.IPPROTO_TCP, getattr(socket, "TCP_USER_TIMEOUT", None), int(unanswered_s * 1000)),
    ]
    for level, option, value in options:
        if option is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(level, option, value)
