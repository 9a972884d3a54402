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

The bulk sender still wants to know of a cut path within ``DEAD_LINK_S``: a master
waiting ``SLOW_PEER_S`` for a partitioned slave holds SYNC writes that long. The kernel
tells the two apart (``unanswered_s``), in the two ways a path goes:

- *Packets lost on the way*: data sent, resent after a timeout, and not acknowledged for
  ``DEAD_LINK_S``, since a live kernel acknowledges a resent segment within a round trip
  however busy its process is.
- *No route from here* (the sender's own host drops them, as a blackhole route does):
  nothing leaves, so nothing is unacknowledged or resent; the bytes wait unsent with the
  peer's window open, and the kernel's probes (which would carry them) find no answer.

A closed window is probed, not resent: nothing is unacknowledged, and the window is shut,
so neither way applies however long the probes back off.
"""

from __future__ import annotations

import contextlib
import socket
import struct

# The kernel gives up on a connection whose peer's TCP has not answered for this long.
DEAD_LINK_S = 2
# How long a sender allows its peer's window to stay closed (or its data unanswered).
SLOW_PEER_S = 10
# ``struct tcp_info`` (linux/tcp.h) up to ``tcpi_snd_wnd`` (Linux 5.4): eight bytes of
# state (byte 2 ``tcpi_retransmits``: timeouts since the last progress; byte 3
# ``tcpi_probes``: window probes unanswered), then counters in their natural alignment.
TCP_INFO = struct.Struct("=8B24I4Q6I4Q2I2Q4I")
# Before ``tcpi_snd_wnd`` (older kernels): the first way alone is told.
TCP_INFO_OLD = struct.Struct("=8B13I")
RETRANSMITS_AT = 2
PROBES_AT = 3
SND_MSS_AT = 10
UNACKED_AT = 12
LAST_ACK_RECV_MS_AT = 20
NOTSENT_BYTES_AT = 38
SND_WND_AT = 53


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


def unanswered_s(sock: socket.socket | None) -> float:
    """How long the peer's TCP has left this connection's data unanswered, where the
    kernel shows the path is gone: data resent and not acknowledged, or data it could not
    send at all into an open window (seconds since the last acknowledgement; 0.0 while the
    peer answers, for a closed window, and where the kernel does not say)."""
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return 0.0
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO.size)
    except (OSError, AttributeError):  # closed, or no TCP_INFO on this OS
        return 0.0
    if len(raw) >= TCP_INFO.size:
        fields = TCP_INFO.unpack(raw)
    elif len(raw) >= TCP_INFO_OLD.size:
        fields = TCP_INFO_OLD.unpack_from(raw)
    else:
        return 0.0
    if _resent_unanswered(fields) or _unsendable(fields):
        return fields[LAST_ACK_RECV_MS_AT] / 1000
    return 0.0


def _resent_unanswered(fields: tuple[int, ...]) -> bool:
    return fields[UNACKED_AT] > 0 and fields[RETRANSMITS_AT] > 0


def _unsendable(fields: tuple[int, ...]) -> bool:
    """Bytes wait unsent with nothing in flight, the peer's window has room for a
    segment, and a probe has fired: only a local refusal (no route) holds them."""
    if len(fields) <= SND_WND_AT:
        return False
    return (
        fields[UNACKED_AT] == 0
        and fields[NOTSENT_BYTES_AT] > 0
        and fields[PROBES_AT] > 0
        and fields[SND_WND_AT] >= min(fields[SND_MSS_AT], fields[NOTSENT_BYTES_AT])
    )
