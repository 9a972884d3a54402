"""Authentication of a replication link, protocol 2: the handshake's proofs, the session
keys derived from it, and the MAC every later frame carries.

Both ends know the cluster secret and never send it. The master's CHALLENGE and the
slave's HELLO each bring a fresh random nonce; the *transcript* (protocol, broker group,
slave id, both nonces) names this one handshake. Each end proves the secret with an
HMAC-SHA256 of the transcript under a label of its own role, so a proof can only ever pass
as the role that made it: no node can be made to answer for another (reflection), and a
node id can never collide with a role. HKDF-SHA256 of the secret and the transcript gives
one key per direction. Every frame after the handshake carries a 16-byte tag: AES-256-GCM
used as a MAC (GMAC: nothing is encrypted, the payload is the associated data, so its
length is covered too) with a nonce made of the direction, the frame's kind and that
direction's frame count. So a frame cannot be altered, injected, replayed (in this
session or another) or reordered without the receiver noticing before it acts on it. A
nonce never repeats under a key: keys are new with every handshake, and the count only
grows. GMAC runs at several GB/s with AES-NI (HMAC-SHA256 cost 10 times more per DATA
frame here).

The tag is OpenSSL's libcrypto's, reached two ways: ``ha._replica_lane.Gmac`` (C, the key
schedule kept per direction, and usable by the replica lane without the GIL) where
libcrypto.so.3 opens, else ``AesGcmMac`` through the cryptography package (its twin: the
two give the same tags, tests/ha/test_replica_lane.py).

The link is authenticated, not encrypted: records cross it in the clear.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
import secrets
import struct
from dataclasses import dataclass
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

PROTOCOL_LABEL = b"ferrymq replication 2"
MAC_BYTES = 16  # a GCM tag
NONCE_BYTES = 16
_NONCE_PATTERN = re.compile(r"[0-9a-f]{32}")
_FIELD_LENGTH = struct.Struct(">H")
_NONCE = struct.Struct(">BBxxQ")  # direction, frame kind, 0, 0, frame count: 12 bytes

try:
    from ha._replica_lane import Gmac as NativeGmac
except ImportError:  # no libcrypto.so.3 to open: the cryptography package's (AesGcmMac)
    NativeGmac = None


class Role(enum.Enum):
    """Who made a proof, and who sends on a direction of the link."""

    MASTER = b"\x01"
    SLAVE = b"\x02"

    @property
    def other(self) -> Role:
        return Role.SLAVE if self is Role.MASTER else Role.MASTER


def new_nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


def is_nonce(value: object) -> bool:
    """Whether ``value`` is a nonce as ``new_nonce`` makes them (32 lowercase hex digits)."""
    return isinstance(value, str) and _NONCE_PATTERN.fullmatch(value) is not None


@dataclass(frozen=True)
class Handshake:
    """What both ends of one link agree on before either trusts the other."""

    broker_group: str
    slave_id: str
    master_nonce: str
    slave_nonce: str

    def transcript(self) -> bytes:
        """The fields, each length-prefixed, so that no two handshakes encode alike."""
        fields = (self.broker_group, self.slave_id, self.master_nonce, self.slave_nonce)
        encoded = [PROTOCOL_LABEL]
        for text in fields:
            raw = text.encode()
            if len(raw) > 0xFFFF:
                raise ValueError(f"a handshake field of {len(raw)} bytes is over 65535")
            encoded += [_FIELD_LENGTH.pack(len(raw)), raw]
        return b"".join(encoded)


def proof(secret: str, role: Role, handshake: Handshake) -> str:
    """``role``'s proof that it knows ``secret``, for this handshake only."""
    message = b"proof" + role.value + handshake.transcript()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def proof_matches(secret: str, role: Role, handshake: Handshake, answer: object) -> bool:
    """Whether ``answer`` is ``role``'s proof for this handshake (constant time)."""
    if not isinstance(answer, str):
        return False
    return hmac.compare_digest(proof(secret, role, handshake), answer)


class Gmac(Protocol):
    """What makes and checks one direction's tags (``ha._replica_lane.Gmac``, ``AesGcmMac``)."""

    def seal(self, kind: int, sequence: int, payload: bytes | bytearray | memoryview) -> bytes: ...

    def verify(
        self,
        kind: int,
        sequence: int,
        payload: bytes | bytearray | memoryview,
        tag: bytes | memoryview,
    ) -> bool: ...


class AesGcmMac:
    """The tags of one direction's frames through the cryptography package: the twin of
    ``ha._replica_lane.Gmac`` (same methods, same tags)."""

    def __init__(self, key: bytes, direction: int) -> None:
        self._aead = AESGCM(key)
        self._direction = direction

    def seal(self, kind: int, sequence: int, payload: bytes | bytearray | memoryview) -> bytes:
        """The tag of frame number ``sequence``, of ``kind``, over ``payload``."""
        return self._aead.encrypt(_NONCE.pack(self._direction, kind, sequence), b"", payload)

    def verify(
        self,
        kind: int,
        sequence: int,
        payload: bytes | bytearray | memoryview,
        tag: bytes | memoryview,
    ) -> bool:
        """Whether ``tag`` is ``seal(kind, sequence, payload)``."""
        try:
            self._aead.decrypt(_NONCE.pack(self._direction, kind, sequence), tag, payload)
        except InvalidTag:
            return False
        return True


def frame_gmac(key: bytes, direction: Role) -> Gmac:
    """One direction's tags: libcrypto's through C where it opens, else the twin."""
    maker = NativeGmac if NativeGmac is not None else AesGcmMac
    return maker(key, direction.value[0])


class FrameMac:
    """The MAC of one direction of one link. The sender calls ``seal`` and the receiver
    ``verify`` for each frame in order; each keeps its own count, so a frame that is
    missing, repeated or moved fails at the receiver. The replica lane
    (``ha/replica_lane.py``) verifies frames with ``gmac`` itself and moves ``sequence``
    past the ones it took."""

    def __init__(self, key: bytes, direction: Role) -> None:
        self.gmac = frame_gmac(key, direction)
        self.sequence = 0

    def seal(self, kind: int, payload: bytes) -> bytes:
        """The tag of the next frame sent, of ``kind``, over ``payload``."""
        tag = self.gmac.seal(kind, self.sequence, payload)
        self.sequence += 1
        return tag

    def verify(
        self, kind: int, payload: bytes | bytearray | memoryview, tag: bytes | memoryview
    ) -> bool:
        """Whether ``tag`` is right for the next frame expected; the count moves on only
        when it is (a failed frame ends the link anyway)."""
        if not self.gmac.verify(kind, self.sequence, payload, tag):
            return False
        self.sequence += 1
        return True


@dataclass
class LinkMacs:
    """The two directions of one link, seen from one end."""

    outgoing: FrameMac
    incoming: FrameMac


def session_macs(secret: str, handshake: Handshake, me: Role) -> LinkMacs:
    """The MACs of this link for the end playing ``me``: a key per direction, from the
    secret and this handshake's transcript (so from both nonces)."""
    keys = HKDF(
        algorithm=hashes.SHA256(),
        length=64,
        salt=None,
        info=b"session keys" + handshake.transcript(),
    ).derive(secret.encode())
    by_sender = {Role.MASTER: keys[:32], Role.SLAVE: keys[32:]}
    return LinkMacs(
        outgoing=FrameMac(by_sender[me], me),
        incoming=FrameMac(by_sender[me.other], me.other),
    )
