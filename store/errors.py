"""Errors raised by the storage engine.

Operating errors (a full disk, replicated bytes that do not fit) are exceptions callers
handle; bad input and corrupt records are the formats' errors (``ferrymq.codec.errors``).
Broken invariants are ``AssertionError`` and mean a bug: the engine stops rather than
continue on bad state.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every operating error of the store."""


class DiskFullError(StoreError):
    """The file system refused space (ENOSPC); nothing of the failed append is visible."""


class ReplicaMismatch(StoreError):
    """Replicated bytes do not start where this log ends: the replication link must
    compare histories again before it can go on."""


class ReplicaDiverged(ReplicaMismatch):
    """Replicated bytes start at this log's end but are not whole records there: the
    two logs differ below that point although their epoch histories agree. Nothing is
    stored; an operator must look (a bug, or a disk that lost acknowledged bytes)."""


class RecoveryRefused(StoreError):
    """Recovery found an invalid record but could not keep the bytes from it to the end
    of the data aside: nothing was cut and the store does not open (the message names the
    offset, the reason and what the operator does)."""
