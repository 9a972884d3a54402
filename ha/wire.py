"""The replication link's frames on the replication port, protocol 2: both ends read and
write them through ``ha/link_stream.py``'s stream (the master takes ACKs as they arrive,
``take_sealed``; tests also drive these readers with asyncio's streams).

Every frame is ``kind (1 byte) | length (4, big-endian) | body``. Before the ends have
authenticated each other a body is JSON and at most ``PREAUTH_MAX_FRAME_BYTES``; after,
every frame is *sealed*: its body is the payload followed by a ``MAC_BYTES`` tag
(``ha/link_auth.py``: a GMAC tag over the payload, its nonce the direction, the frame's
kind and the per-direction frame count), checked before the receiver looks at the payload.

The handshake (``PROTOCOL_VERSION`` in its first two frames)::

    master -> slave  CHALLENGE  plain   {version, nonce, group}
    slave -> master  HELLO      plain   {version, node_id, nonce, proof, max_offset,
                                         segment_bytes}
    master -> slave  REFUSED    plain   {reason}                 (and the link ends), or
                     WELCOME    sealed  {proof, max_offset, min_offset}
                     EPOCHS     sealed  {epochs: [[epoch, start offset], ...]}
    slave -> master  START      sealed  {offset}
    then DATA (master -> slave) and ACK (slave -> master), all sealed; REFUSED after the
    handshake is sealed too. A slave whose node shuts down sends a last sealed LEAVING
    (no payload) and waits (``LEAVE_WAIT_S``) for the master to close the link, which it
    does once routing dropped the slave from the in-sync set (at once if it was not
    counted): without the word, the master gave the link the grace of a failover's
    reconnection first (SYNC writes held ~1 s per slave in a rolling restart). A master
    of an earlier release, which does not know the kind, ends the link at once.

The hot frames are binary:

- DATA: ``offset 8 | epoch 8 | epoch start 8 | confirmed offset 8`` then whole CommitLog
  records of one epoch and one segment (none: a heartbeat, every second on an idle link).
- ACK: ``max offset 8``, the end of what the slave appended (and, under SYNC_FLUSH, forced
  to disk); a slave answers every DATA frame, heartbeats included, so a silent slave shows.

A peer of protocol 1 (no version in its CHALLENGE or HELLO) is refused with
``ProtocolMismatch``, never half-understood.

Both ends ask their kernel to end the link when the *network or machine* behind it is
gone (``ferrymq.codec.dead_peer``): sent bytes not acknowledged by the peer's TCP within
``DEAD_LINK_S``, or an idle link whose keepalive probes go unanswered. A peer process that
is merely busy, or stopped, never trips it: its kernel acknowledges and answers probes.
Without it a cut link waited for the silence timeouts (the slave's 5 s, the master's
``max_lag_ms``): a partitioned master or slave cost writes ~5 s in the chaos runs. The
master, which allows a slave's closed window ``SLOW_PEER_S``, also asks its kernel every
quarter second whether its bytes went unanswered for ``DEAD_LINK_S``, resent or held
unsent by a route that drops them (``dead_peer.unanswered_s``,
``ReplicationMaster._watch_path``).
"""

from __future__ import annotations

import asyncio
import enum
import json
import struct
from typing import Protocol

from ha.link_auth import MAC_BYTES, FrameMac

PROTOCOL_VERSION = 2
FRAME_HEADER = struct.Struct(">BI")
DATA_HEADER = struct.Struct(">qqqq")
ACK = struct.Struct(">q")
# A record is at most a few MiB; a frame from an authenticated master is never larger.
MAX_FRAME_BYTES = 64 << 20
# What an end reads before it knows the other has the cluster secret: CHALLENGE, HELLO,
# WELCOME (or a refusal) are a few hundred bytes.
PREAUTH_MAX_FRAME_BYTES = 4096
# A slave sends only ACKs after START, and a LEAVING (smaller) last.
ACK_FRAME_BYTES = ACK.size + MAC_BYTES


class Kind(enum.IntEnum):
    CHALLENGE = 1
    HELLO = 2
    WELCOME = 3
    REFUSED = 4
    START = 5
    DATA = 6
    ACK = 7
    EPOCHS = 8
    LEAVING = 9


class LinkError(Exception):
    """The other side broke the protocol, refused us, or went away."""


class ForgedFrame(LinkError):
    """A sealed frame failed its MAC: altered, injected, replayed or reordered on the way,
    or sent by a peer without the cluster secret."""


class ProtocolMismatch(LinkError):
    """The peer speaks another version of the replication protocol."""


def version_mismatch(peer: str, version: object) -> str:
    """The one message both ends give for a peer of another protocol version."""
    return (
        f"{peer} speaks replication protocol {version}, this node speaks {PROTOCOL_VERSION}: "
        "run the same ferrymq version on every node of the broker group"
    )


class FrameWriter(Protocol):
    """What the link's code writes through: an asyncio writer, or a ``LinkStream``
    (``ha/link_stream.py``)."""

    def write(self, data: bytes) -> None: ...

    def is_closing(self) -> bool: ...


class FrameSource(Protocol):
    """What the link's code reads from: an asyncio reader, or a ``LinkStream``,
    which gives a large read as the buffer the kernel filled (a ``bytearray``)."""

    async def readexactly(self, n: int) -> bytes | bytearray: ...


class GatheringWriter(FrameWriter, Protocol):
    """A ``FrameWriter`` that writes a frame's parts in one call."""

    def writelines(self, parts: tuple[bytes, ...]) -> None: ...


# ---- writing ---------------------------------------------------------------------------
def control(kind: Kind, **fields) -> bytes:
    """A plain frame of the handshake (before authentication)."""
    payload = json.dumps(fields).encode()
    return FRAME_HEADER.pack(kind, len(payload)) + payload


def sealed(mac: FrameMac, kind: Kind, payload: bytes) -> bytes:
    header = FRAME_HEADER.pack(kind, len(payload) + MAC_BYTES)
    return b"".join((header, payload, mac.seal(kind, payload)))


def sealed_control(mac: FrameMac, kind: Kind, **fields) -> bytes:
    return sealed(mac, kind, json.dumps(fields).encode())


def data_payload(
    offset: int, epoch: int, epoch_start: int, confirmed: int, records: bytes
) -> bytes:
    """A DATA frame's payload, its header and records joined: what the tag covers. One
    buffer is sealed in one GMAC call, and the links of one append share it."""
    return DATA_HEADER.pack(offset, epoch, epoch_start, confirmed) + records


def data_frame_parts(mac: FrameMac, payload: bytes) -> tuple[bytes, bytes, bytes]:
    """A DATA frame of ``payload`` (``data_payload``) as its three parts (head, payload,
    tag), for a gathered write that leaves the payload where it is."""
    head = FRAME_HEADER.pack(Kind.DATA, len(payload) + MAC_BYTES)
    return head, payload, mac.seal(Kind.DATA, payload)


def data_frame(
    mac: FrameMac, offset: int, epoch: int, epoch_start: int, confirmed: int, records: bytes
) -> bytes:
    return sealed(mac, Kind.DATA, data_payload(offset, epoch, epoch_start, confirmed, records))


def write_frame(writer: FrameWriter, frame: bytes) -> None:
    """Write ``frame`` on the link, or ``ConnectionError`` when the link is closed already:
    the default event loop drops such a write silently, uvloop raises RuntimeError."""
    if writer.is_closing():
        raise ConnectionError("the replication link is closed")
    writer.write(frame)


def write_frame_parts(writer: GatheringWriter, parts: tuple[bytes, ...]) -> None:
    """``write_frame`` of a frame given in parts: uvloop writes them with one ``writev``,
    without joining them first."""
    if writer.is_closing():
        raise ConnectionError("the replication link is closed")
    writer.writelines(parts)


def ack_frame(mac: FrameMac, offset: int) -> bytes:
    return sealed(mac, Kind.ACK, ACK.pack(offset))


def leaving_frame(mac: FrameMac) -> bytes:
    return sealed(mac, Kind.LEAVING, b"")


# ---- reading ---------------------------------------------------------------------------
async def read_exactly(reader: FrameSource, length: int) -> bytes | bytearray:
    try:
        return await reader.readexactly(length)
    except (asyncio.IncompleteReadError, ConnectionError) as error:
        raise LinkError(f"link closed: {error}") from None


async def read_header(reader: FrameSource, limit: int) -> tuple[int, int]:
    """A frame's kind and body length, refused before any of its body is read when the
    length is over ``limit``."""
    header = await read_exactly(reader, FRAME_HEADER.size)
    kind, length = FRAME_HEADER.unpack(header)
    check_length(length, limit)
    return kind, length


def check_length(length: int, limit: int) -> None:
    """A frame's length against what its reader takes (``LinkError`` when over), from its
    header, before any of its body is read or gathered."""
    if length > limit:
        raise LinkError(f"a frame of {length} bytes is over the limit of {limit} here")


# A frame's kind by its byte: a dict lookup, where ``Kind(kind)`` ran enum's Python per frame.
_KINDS = {int(kind): kind for kind in Kind}


def _kind_name(kind: int) -> str:
    found = _KINDS.get(kind)
    return found.name if found is not None else f"kind-{kind}"


def _kind(kind: int) -> Kind:
    found = _KINDS.get(kind)
    if found is None:
        raise LinkError(f"unknown frame kind {kind}")
    return found


def json_object(kind: Kind, payload: bytes | bytearray | memoryview) -> dict:
    if isinstance(payload, memoryview):  # a sealed frame's payload over 16 KiB
        payload = payload.tobytes()
    try:
        fields = json.loads(payload)
    except ValueError:
        raise LinkError(f"{kind.name} is not JSON") from None
    if not isinstance(fields, dict):
        raise LinkError(f"{kind.name} is not a JSON object")
    return fields


def refusal(kind: Kind, payload: bytes | bytearray | memoryview) -> LinkError:
    reason = json_object(kind, payload).get("reason", "?")
    return LinkError(f"refused: {reason}")


async def read_plain(reader: FrameSource, expected: Kind) -> dict:
    """A handshake frame read before authentication (``PREAUTH_MAX_FRAME_BYTES`` at most);
    a REFUSED raises ``LinkError`` with its reason."""
    kind, length = await read_header(reader, PREAUTH_MAX_FRAME_BYTES)
    payload = await read_exactly(reader, length)
    found = _kind(kind)
    if found is Kind.REFUSED:
        raise refusal(found, payload)
    if found is not expected:
        raise LinkError(f"expected {expected.name}, got {found.name}")
    return json_object(found, payload)


async def read_sealed_body(
    reader: FrameSource, mac: FrameMac, kind: int, length: int
) -> tuple[Kind, bytes | memoryview]:
    """The payload of a sealed frame whose header was read, once its tag checks out. The
    body is read whole, payload and tag in one read: a large body is the buffer the kernel
    filled (``LinkStream``), and its payload a view of it, not a copy. A REFUSED raises
    ``LinkError`` with its reason."""
    _check_holds_mac(length)
    body = await read_exactly(reader, length)
    return _opened(mac, kind, memoryview(body) if isinstance(body, bytearray) else body)


def _check_holds_mac(length: int) -> None:
    if length < MAC_BYTES:
        raise ForgedFrame(f"a frame of {length} bytes cannot hold its MAC")


def _opened(mac: FrameMac, kind: int, body: bytes | memoryview) -> tuple[Kind, bytes | memoryview]:
    """A sealed frame's kind and payload, once the tag at the end of ``body`` checks out;
    a REFUSED raises ``LinkError`` with its reason."""
    split = len(body) - MAC_BYTES
    payload, tag = body[:split], body[split:]
    if not mac.verify(kind, payload, tag):
        raise ForgedFrame(
            f"{_kind_name(kind)} frame #{mac.sequence} ({len(body)} bytes) failed its MAC: "
            "altered, injected, replayed or reordered on the way, or its sender does not "
            "know the cluster secret"
        )
    found = _kind(kind)
    if found is Kind.REFUSED:
        raise refusal(found, payload)
    return found, payload


def take_sealed(
    unread: memoryview, mac: FrameMac, limit: int
) -> tuple[Kind, bytes | memoryview, int] | None:
    """The first frame of ``unread`` (bytes as they arrived), checked as ``read_sealed``
    checks a frame read: its kind, its payload (a view of ``unread``) and its size on the
    wire; None while part of it has yet to arrive. A frame over ``limit`` is refused from
    its header, before the rest of it arrives."""
    if len(unread) < FRAME_HEADER.size:
        return None
    kind, length = FRAME_HEADER.unpack_from(unread)
    check_length(length, limit)
    _check_holds_mac(length)
    size = FRAME_HEADER.size + length
    if len(unread) < size:
        return None
    found, payload = _opened(mac, kind, unread[FRAME_HEADER.size : size])
    return found, payload, size


async def read_sealed(
    reader: FrameSource, mac: FrameMac, limit: int = MAX_FRAME_BYTES
) -> tuple[Kind, bytes | memoryview]:
    """The next frame of an authenticated link; a REFUSED raises ``LinkError``."""
    kind, length = await read_header(reader, limit)
    return await read_sealed_body(reader, mac, kind, length)


async def read_sealed_control(
    reader: FrameSource, mac: FrameMac, expected: Kind, limit: int = MAX_FRAME_BYTES
) -> dict:
    kind, payload = await read_sealed(reader, mac, limit)
    if kind is not expected:
        raise LinkError(f"expected {expected.name}, got {kind.name}")
    return json_object(kind, payload)
