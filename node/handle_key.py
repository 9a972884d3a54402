"""The key of receipt handles' MACs (``node.receipt_handle``).

With a cluster secret it is derived from it (HKDF-SHA256, label ``HKDF_LABEL``), so every
node of the cluster, a new master after a failover included, verifies the handles another
node issued. A node without one (a standalone node, which makes up its Raft secret at each
start) keeps a random key in ``<data dir>/receipt-handle.key`` (mode 0600), made at its
first start, so in-flight handles stay valid across restarts.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat

from node.secret_box import derive_key

HKDF_LABEL = b"ferrymq receipt handles v1"
KEY_FILE = "receipt-handle.key"
KEY_BYTES = 32


class HandleKeyError(Exception):
    """The key file cannot be used; the message says what the operator should do."""


def receipt_handle_key(cluster_secret: str, data_dir: str) -> bytes:
    if cluster_secret:
        return derive_key(cluster_secret, HKDF_LABEL)
    path = os.path.join(data_dir, KEY_FILE)
    try:
        return _read_key(path)
    except FileNotFoundError:
        return _create_key(path)


def _read_key(path: str) -> bytes:
    with open(path, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        key = f.read(KEY_BYTES + 1)
    if stat.S_IMODE(mode) & 0o077:
        raise HandleKeyError(
            f"{path} is readable by other users (mode {stat.S_IMODE(mode):04o}): whoever reads "
            f"it can forge receipt handles; chmod 600 it"
        )
    if len(key) != KEY_BYTES:
        raise HandleKeyError(
            f"{path} holds {len(key)} bytes, a key has {KEY_BYTES}: it was altered or cut; "
            "remove it to make a new key (handles in flight are then refused and their "
            "messages delivered again after their invisibility)"
        )
    return key


def _create_key(path: str) -> bytes:
    """A new key, written whole and durable before it is used: a crash leaves either no
    key file or a complete one."""
    key = secrets.token_bytes(KEY_BYTES)
    partial = f"{path}.{secrets.token_hex(4)}.tmp"
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as f:
            f.write(key)
            f.flush()
            os.fsync(f.fileno())
        os.rename(partial, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise
    directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return key
