"""What each fsync made durable, recorded for the chaos suite's power-loss fault.

Off unless a node process starts with ``FERRYMQ_CHAOS_SYNC_LEDGER=1`` in its environment
(the chaos runner sets it for its nodes). When on, every sync of a CommitLog segment or
consume-queue file appends ``<path relative to the data directory> <bytes durable from the
file's start>`` to
``<data>/chaos-sync-ledger`` after the sync returned and before the store counts the
bytes as flushed, so nothing acknowledged as durable is missing from it. ``chaos.power``
imitates a power loss by killing the node and zeroing each such file past its last
recorded length. The ledger goes through the page cache, which a SIGKILL keeps.

Thread-safety: ``record`` may be called from any thread (flusher, group commit, writer).
"""

from __future__ import annotations

import os
import threading

ENVIRONMENT = "FERRYMQ_CHAOS_SYNC_LEDGER"
LEDGER_FILE = "chaos-sync-ledger"

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
