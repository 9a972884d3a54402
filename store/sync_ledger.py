"""What each fsync made durable, recorded for the chaos suite's power-loss fault.

Off unless a node process starts with ``FERRYMQ_CHAOS_SYNC_LEDGER=1`` in its environment
(the chaos runner sets it for its nodes). When on, every sync of a CommitLog segment or
consume-queue file appends ``<path relative to the data directory> <bytes durable from the
file's start>`` to
``<data>/chaos-sync-ledger`` after the sync returned and before the store counts the
bytes as flushed, so nothing acknowledged as durable is missing from it. ``chaos.power``
imitates a power loss by killing the node and zeroing each such file past its last
recorded length. The ledger goes through the page cache, which a SIGKILL keeps.

Files that are not append-only (index files) are copied instead: before each sync, into
``<data>/chaos-sync-copies/<path>.pending``, renamed to ``<path>`` once the sync returned.
The copy holds only what was written before the sync, so the disk held at least that.

Thread-safety: ``record`` and the copies may be called from any thread (flusher, group
commit, writer).
"""

from __future__ import annotations

import os
import shutil
import threading

ENVIRONMENT = "FERRYMQ_CHAOS_SYNC_LEDGER"
LEDGER_FILE = "chaos-sync-ledger"
COPIES_DIRECTORY = "chaos-sync-copies"  # index files as their last sync left them

_lock = threading.Lock()
_ledger = None  # the open ledger file of this process's store, when enabled
_root = ""


def enable_if_asked(data_dir: str) -> None:
    """Record for the store in ``data_dir`` when the environment asks for it. Called by
    the node process, which holds one store: the ledger is per process."""
    if os.environ.get(ENVIRONMENT) == "1":
        enable(data_dir)


def enable(data_dir: str) -> None:
    global _ledger, _root
    with _lock:
        if _ledger is None:
            _root = os.path.abspath(data_dir)
            os.makedirs(_root, exist_ok=True)
            _ledger = open(os.path.join(_root, LEDGER_FILE), "a", encoding="utf-8")  # noqa: SIM115


def disable() -> None:
    """Stop recording (tests that enabled it in their own process)."""
    global _ledger
    with _lock:
        if _ledger is not None:
            _ledger.close()
            _ledger = None


def record(path: str, durable_bytes: int) -> None:
    """``path``'s first ``durable_bytes`` bytes are on disk."""
    if _ledger is None:
        return
    with _lock:
        _ledger.write(f"{os.path.relpath(path, _root)} {durable_bytes}\n")
        _ledger.flush()


def read(data_dir: str) -> dict[str, int]:
    """The last durable length recorded per file (relative path)."""
    durable: dict[str, int] = {}
    try:
        with open(os.path.join(data_dir, LEDGER_FILE), encoding="utf-8") as f:
            for line in f:
                path, _, length = line.rstrip("\n").rpartition(" ")
                if path and length.isdigit():
                    durable[path] = int(length)
    except FileNotFoundError:
        pass
    return durable


def copy_before_sync(path: str) -> str | None:
    """Copy ``path`` before it is synced; pass the result to ``copy_synced`` after."""
    if _ledger is None:
        return None
    pending = os.path.join(_root, COPIES_DIRECTORY, os.path.relpath(path, _root)) + ".pending"
    os.makedirs(os.path.dirname(pending), exist_ok=True)
    try:
        shutil.copyfile(path, pending)
    except FileNotFoundError:
        return None  # deleted by retention meanwhile
    return pending


def copy_synced(pending: str | None) -> None:
    if pending is not None:
        os.replace(pending, pending.removesuffix(".pending"))


def synced_copy(data_dir: str, relative_path: str) -> str | None:
    """The copy of a file as its last completed sync left it, if it was ever synced."""
    path = os.path.join(data_dir, COPIES_DIRECTORY, relative_path)
    return path if os.path.exists(path) else None
