"""Errors of the formats: bytes that are not a record, values a record cannot hold."""

from __future__ import annotations


class CodecError(Exception):
    """Base class of the format errors."""


class InvalidMessageError(CodecError):
    """A message breaks a documented limit (name, size, characters); nothing was written."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class CorruptRecordError(CodecError):
    """Bytes read as a message record are not one: a bad magic code, lengths that disagree,
    a topic or properties that are not UTF-8. A damaged file, or a position that is no
    record boundary. Raised by the record parsers instead of an ``assert``, which
    ``python -O`` strips: then they would decode garbage."""
