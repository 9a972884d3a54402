"""The replication link's frames (asyncio streams on the replication port).

Every frame is ``kind (1 byte) | length (4, big-endian) | payload``. Control frames (rare)
carry JSON; the two hot frames are binary:

- DATA (master → slave): ``offset 8 | epoch 8 | epoch start 8 | confirmed offset 8`` then
  whole CommitLog records of one epoch and one segment (none: a heartbeat).
- ACK (slave → master): ``max offset 8``, the end of what the slave appended (and, under
  SYNC_FLUSH, forced to disk).

The handshake authenticates both ends with the cluster secret: the master sends a random
nonce (CHALLENGE), the slave answers HMAC-SHA256(secret, nonce | node id) in its HELLO
with a nonce of its own, and the master's WELCOME answers HMAC-SHA256(secret, that nonce |
``MASTER_IDENTITY``). A wrong answer gets REFUSED (or, on the slave, drops the link before
it truncates or appends anything), and both sides log it.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import hmac
import json
import struct

FRAME_HEADER = struct.Struct(">BI")
DATA_HEADER = struct.Struct(">qqqq")
ACK = struct.Struct(">q")
MAX_FRAME_BYTES = 64 << 20  # a record is at most a few MiB; anything larger is an attack
MASTER_IDENTITY = "master"  # what the master's proof names (a slave's names its node id)


class Kind(enum.IntEnum):
    CHALLENGE = 1
    HELLO = 2
    WELCOME = 3
    REFUSED = 4
    START = 5
    DATA = 6
    ACK = 7


class LinkError(Exception):
    """The other side broke the protocol, refused us, or went away."""


def proof(secret: str, nonce: str, node_id: str) -> str:
    return hmac.new(secret.encode(), f"{nonce}|{node_id}".encode(), hashlib.sha256).hexdigest()


def proof_matches(secret: str, nonce: str, node_id: str, answer: str) -> bool:
    return hmac.compare_digest(proof(secret, nonce, node_id), answer)


def frame(kind: Kind, payload: bytes) -> bytes:
    return FRAME_HEADER.pack(kind, len(payload)) + payload


def control(kind: Kind, **fields) -> bytes:
    return frame(kind, json.dumps(fields).encode())


def data_frame(offset: int, epoch: int, epoch_start: int, confirmed: int, records: bytes) -> bytes:
    header = DATA_HEADER.pack(offset, epoch, epoch_start, confirmed)
    return FRAME_HEADER.pack(Kind.DATA, len(header) + len(records)) + header + records


def ack_frame(offset: int) -> bytes:
    return frame(Kind.ACK, ACK.pack(offset))


async def read_frame(reader: asyncio.StreamReader) -> tuple[Kind, bytes]:
    try:
        header = await reader.readexactly(FRAME_HEADER.size)
        kind, length = FRAME_HEADER.unpack(header)
        if length > MAX_FRAME_BYTES:
            raise LinkError(f"frame of {length} bytes is over the limit")
        payload = await reader.readexactly(length)
    except (asyncio.IncompleteReadError, ConnectionError) as error:
        raise LinkError(f"link closed: {error}") from None
    try:
        return Kind(kind), payload
    except ValueError:
        raise LinkError(f"unknown frame kind {kind}") from None


async def read_control(reader: asyncio.StreamReader, expected: Kind) -> dict:
    kind, payload = await read_frame(reader)
    if kind is Kind.REFUSED:
        raise LinkError(f"refused: {json.loads(payload).get('reason', '?')}")
    if kind is not expected:
        raise LinkError(f"expected {expected.name}, got {kind.name}")
    try:
        fields = json.loads(payload)
    except ValueError:
        raise LinkError(f"{kind.name} is not JSON") from None
    if not isinstance(fields, dict):
        raise LinkError(f"{kind.name} is not an object")
    return fields
