"""Messages as RocketMQ 4.x clients send them: a send's properties text, and the body of
``SEND_BATCH_MESSAGE`` (RocketMQ's ``MessageDecoder.encodeMessages`` layout).

A batch body is messages back to back, each big-endian::

    total size   int32   the whole message, itself included
    magic        int32   0 (unused)
    body CRC     int32   0 (unused)
    flag         int32
    body         int32 length + bytes
    properties   int16 length + ``name 0x01 value 0x02`` text

Strict on input: a batch that is not whole messages is refused as a whole, naming the
message and byte where it goes wrong, and nothing of it is stored.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ferrymq.codec.errors import CodecError, InvalidMessageError
from ferrymq.codec.properties import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR

BATCH_HEAD = struct.Struct(">iiiii")  # total size, magic, body CRC, flag, body length
PROPERTIES_LENGTH = struct.Struct(">H")
BATCH_OVERHEAD = BATCH_HEAD.size + PROPERTIES_LENGTH.size  # a message with no body nor properties


class MalformedBatch(CodecError):
    """A batch body that is not whole messages."""


@dataclass(frozen=True, slots=True)
class BatchedMessage:
    flag: int
    body: bytes
    properties: bytes  # the encoded text, as sent


def decode_batch(data: bytes, max_messages: int) -> list[BatchedMessage]:
    """The messages of a batch body; ``MalformedBatch`` unless it is 1..``max_messages``
    whole messages and nothing else."""
    messages = []
    position, end = 0, len(data)
    while position < end:
        index = len(messages)
        if index >= max_messages:
            raise MalformedBatch(f"more than {max_messages} messages in one batch")
        if end - position < BATCH_OVERHEAD:
            raise MalformedBatch(
                f"message {index} at byte {position}: {end - position} bytes left, a message "
                f"takes at least {BATCH_OVERHEAD}"
            )
        total, _, _, flag, body_length = BATCH_HEAD.unpack_from(data, position)
        body_start = position + BATCH_HEAD.size
        body_end = body_start + body_length
        if body_length < 0 or body_end + PROPERTIES_LENGTH.size > end:
            raise MalformedBatch(
                f"message {index} at byte {position}: a body of {body_length} bytes does not fit"
            )
        (properties_length,) = PROPERTIES_LENGTH.unpack_from(data, body_end)
        properties_start = body_end + PROPERTIES_LENGTH.size
        stop = properties_start + properties_length
        if stop > end:
            raise MalformedBatch(
                f"message {index} at byte {position}: properties of {properties_length} bytes "
                "do not fit"
            )
        if total != stop - position:
            raise MalformedBatch(
                f"message {index} at byte {position}: total size {total}, its fields take "
                f"{stop - position}"
            )
        messages.append(
            BatchedMessage(flag, data[body_start:body_end], data[properties_start:stop])
        )
        position = stop
    if not messages:
        raise MalformedBatch("the batch holds no message")
    return messages


def encode_batch(messages: list[BatchedMessage]) -> bytes:
    """The body of a ``SEND_BATCH_MESSAGE`` holding ``messages``."""
    parts = []
    for message in messages:
        total = BATCH_OVERHEAD + len(message.body) + len(message.properties)
        parts.append(BATCH_HEAD.pack(total, 0, 0, message.flag, len(message.body)))
        parts.append(message.body)
        parts.append(PROPERTIES_LENGTH.pack(len(message.properties)))
        parts.append(message.properties)
    return b"".join(parts)


def parse_sent_properties(raw: bytes | str) -> dict[str, str]:
    """A sent message's properties: ``name 0x01 value`` pairs joined by 0x02, with or
    without a trailing 0x02 (the Java client strips it, Go and ali-ons leave it).
    ``InvalidMessageError`` (PROPERTY_INVALID) for text that is not UTF-8, a pair without
    exactly one 0x01, or an empty name; a later pair replaces an earlier one of the same
    name, as every client's parser does."""
    try:
        text = raw.decode() if isinstance(raw, bytes | bytearray) else raw
    except UnicodeDecodeError as error:
        raise InvalidMessageError(
            "PROPERTY_INVALID", f"properties are not UTF-8 ({error.reason})"
        ) from None
    properties: dict[str, str] = {}
    if not text:
        return properties
    for pair in text.split(PROPERTY_SEPARATOR):
        if not pair:
            continue  # the trailing separator, or an empty pair
        name, separator, value = pair.partition(NAME_VALUE_SEPARATOR)
        if not separator or NAME_VALUE_SEPARATOR in value or not name:
            raise InvalidMessageError(
                "PROPERTY_INVALID",
                f"property {pair[:64]!r} is not one name and value joined by 0x01",
            )
        properties[name] = value
    return properties
