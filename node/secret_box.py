"""Users' secret keys, encrypted at rest in the routing state.

The RocketMQ 5 signature is HMAC-SHA1 keyed by the secret itself, so a node must recover
the secret to verify a request: a one-way hash cannot be used. Secrets are therefore sealed
with AES-256-GCM under a key derived (HKDF-SHA256) from the cluster secret, which every
node has and which is never stored in the routing state, its Raft journal or snapshots.
The access key is the associated data, so a sealed secret moved to another user does not
open. Reading the Raft files alone reveals no secret; reading them together with a node's
configuration does (see docs/security.md).
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

VERSION = b"\x01"
NONCE_BYTES = 12
HKDF_INFO = b"ferrymq user secrets v1"


class SealError(ValueError):
    """A sealed secret does not open: another cluster secret sealed it, or it was altered."""


def derive_key(cluster_secret: str, label: bytes) -> bytes:
    """A 256-bit key for one purpose (``label``) from the cluster secret: every node derives
    the same one, and a key of one purpose says nothing about another's."""
    if not cluster_secret:
        raise ValueError("deriving a key needs the cluster secret")
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=label).derive(
        cluster_secret.encode()
    )


class SecretBox:
    def __init__(self, cluster_secret: str) -> None:
        if not cluster_secret:
            raise ValueError("sealing user secrets needs the cluster secret")
        self._aead = AESGCM(derive_key(cluster_secret, HKDF_INFO))

    def seal(self, access_key: str, secret_key: str) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return VERSION + nonce + self._aead.encrypt(nonce, secret_key.encode(), access_key.encode())

    def open(self, access_key: str, sealed: bytes) -> str:
        if sealed[:1] != VERSION or len(sealed) < 1 + NONCE_BYTES:
            raise SealError("unknown sealed-secret format")
        nonce, ciphertext = sealed[1 : 1 + NONCE_BYTES], sealed[1 + NONCE_BYTES :]
        try:
            return self._aead.decrypt(nonce, ciphertext, access_key.encode()).decode()
        except InvalidTag:
            raise SealError(
                f"the secret of {access_key} does not open with this cluster secret"
            ) from None
