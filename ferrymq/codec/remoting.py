"""RocketMQ's remoting frames (the 4.x ``RemotingCommand`` over TCP), both header forms.

A frame, big-endian (docs/architecture.md, "Remoting")::

    total length   int32    everything after itself: 4 + header + body
    mark           uint32   high byte: serialize type (0 JSON, 1 ROCKETMQ); low 24 bits:
                            header length
    header         JSON object, or RocketMQ's binary layout (``BINARY_FIXED`` and after)
    body           the rest

The JSON header is what RocketMQ 4.x clients send: ``code``, ``language`` (an enum name),
``version``, ``opaque``, ``flag``, optional ``remark`` and ``extFields``, whose values are
strings (``ali-ons`` sends bare numbers and booleans: they are read as Java would print
them). The binary header holds the same fields: code int16, language ordinal uint8,
version int16, opaque int32, flag int32, remark (int32 length + UTF-8), ext fields (int32
length, then per field int16 key length + key, int32 value length + value).

A request and its response share ``opaque``; flag bit 0 marks a response, bit 1 a oneway
request (nothing is answered). Every way a frame can be unreadable raises its own
``FrameError`` subclass, which says whether the frame's ``opaque`` was read (it may then
be answered with a remark) or not (the connection cannot be answered safely).

The node's transport and the SDK share this module: the standard library, and the binary
header's C twins (``ferrymq.codec._speedups``).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from json.scanner import make_scanner

from ferrymq.codec import _speedups
from ferrymq.codec.errors import CodecError
from ferrymq.codec.remoting_codes import LANGUAGE_ORDINALS, LANGUAGES

FRAME_LENGTH = struct.Struct(">i")
FRAME_HEAD = struct.Struct(">iI")  # total length, serialize type << 24 | header length
MARK = struct.Struct(">I")
# code, language, version, opaque, flag, remark length: the binary header's fixed part.
BINARY_FIXED = struct.Struct(">hBhiii")
INT32 = struct.Struct(">i")
INT16 = struct.Struct(">h")

SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1
SERIALIZE_TYPES = (SERIALIZE_JSON, SERIALIZE_ROCKETMQ)
FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2
HEADER_LENGTH_MASK = 0xFFFFFF

# RocketMQ's limit on a frame; a header is a few hundred bytes, the largest a send's
# properties (32,767 bytes, up to 6 JSON bytes each when escaped).
DEFAULT_MAX_FRAME_BYTES = 16 << 20
DEFAULT_MAX_HEADER_BYTES = 256 << 10
MIN_FRAME_LENGTH = MARK.size  # a frame holds at least its mark

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1

_json_string = encode_basestring_ascii  # a JSON string as ``json.dumps`` writes it
_SCAN_JSON = make_scanner(json.JSONDecoder())  # what json.loads scans with
_STR_TYPE = {str}
_MISSING = object()
_OTHER_ORDINAL = LANGUAGE_ORDINALS["OTHER"]


class FrameError(CodecError):
    """A frame that cannot be read. ``opaque`` is the request's opaque when the header got
    far enough to say it (the frame can then be answered with a remark), else None (only
    closing the connection is safe: an answer could reach the wrong caller)."""

    def __init__(self, message: str, opaque: int | None = None) -> None:
        super().__init__(message)
        self.opaque = opaque


class FrameTooLarge(FrameError):
    """The announced total length is over the limit: refused before the body is read."""


class FrameLengthInvalid(FrameError):
    """The total length is below a frame's minimum, or the header length runs past it."""


class HeaderTooLarge(FrameError):
    """The header length is over the header limit."""


class UnknownSerializeType(FrameError):
    """The mark's high byte is neither 0 (JSON) nor 1 (ROCKETMQ)."""


class MalformedHeader(FrameError):
    """The header is not a JSON object, is cut short, or holds a field of the wrong type
    (``code`` missing, ``opaque`` not an integer, ...)."""


class HeaderFieldError(CodecError):
    """A request's ext field (``queueId``, ``topic``, ...) is missing or not of its type;
    the frame itself is fine. ``name`` is the field."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


@dataclass(slots=True)
class RemotingCommand:
    """One request or response. ``ext_fields`` values are strings on the wire. Read-only
    by convention, the dict included: a command is shared between the door, its handlers
    and their answers, and a changed one is a copy (``dataclasses.replace``). Not
    ``frozen``: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``, 4.5 µs against 0.7 for nine fields, and a 4.x send makes three
    commands."""

    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    language: str = "JAVA"
    version: int = 0
    serialize_type: int = SERIALIZE_JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def reply(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        version: int = 0,
    ) -> RemotingCommand:
        """The response to this request: its opaque, the response flag, and the request's
        serialize type (as RocketMQ's broker answers; every client reads what it sent)."""
        return RemotingCommand(
            code,
            self.opaque,
            FLAG_RESPONSE,
            remark,
            ext_fields if ext_fields is not None else {},
            body,
            "JAVA",
            version,
            self.serialize_type,
        )

    # ---- ext fields as a request header: each accessor names what is wrong -------------
    def text(self, name: str, default: object = _MISSING) -> str:
        value = self.ext_fields.get(name)
        if value is None:
            if default is _MISSING:
                raise HeaderFieldError(name, f"header field {name} is missing")
            return default  # type: ignore[return-value]
        return value

    def integer(
        self,
        name: str,
        default: object = _MISSING,
        low: int = INT64_MIN,
        high: int = INT64_MAX,
    ) -> int:
        """The field as a Java ``long`` (or within ``low``..``high``)."""
        value = self.ext_fields.get(name)
        if value is None or value == "":
            if default is _MISSING:
                raise HeaderFieldError(name, f"header field {name} is missing")
            return default  # type: ignore[return-value]
        if value.isdigit() and value.isascii():
            number = int(value)  # the common case: plain ASCII digits
        else:
            number = _parse_integer(value)
            if number is None:
                raise HeaderFieldError(name, f"header field {name}={value!r} is not an integer")
        if not low <= number <= high:
            raise HeaderFieldError(name, f"header field {name}={value} is outside {low}..{high}")
        return number

    def int32(self, name: str, default: object = _MISSING) -> int:
        """The field as a Java ``int``."""
        return self.integer(name, default, INT32_MIN, INT32_MAX)

    def boolean(self, name: str, default: bool = False) -> bool:
        """Java's ``Boolean.parseBoolean``: true only for "true" in any case."""
        value = self.ext_fields.get(name)
        if value is None:
            return default
        return value.lower() == "true"


def _parse_integer(text: str) -> int | None:
    """Java's ``Long.parseLong`` grammar: an optional sign and ASCII digits, nothing else
    (``int()`` would also take spaces, underscores and other scripts' digits)."""
    digits = text[1:] if text[:1] in ("-", "+") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    return int(text)


# ---- encoding -------------------------------------------------------------------------
def encode(command: RemotingCommand) -> bytes:
    """The whole frame, total length first."""
    return encode_head(command) + command.body


def encode_head(command: RemotingCommand) -> bytes:
    """Everything of the frame before its body (a large body is then written as it is,
    without a copy into the frame). A binary header is written in C (``binary_head``,
    ferrymq/codec/_speedups.c), which declines whatever ``encode_head_in_python``, its
    twin, converts or refuses."""
    if command.serialize_type == SERIALIZE_ROCKETMQ:
        head = _speedups.binary_head(
            command.code,
            LANGUAGE_ORDINALS.get(command.language, _OTHER_ORDINAL),
            command.version,
            command.opaque,
            command.flag,
            command.remark,
            command.ext_fields,
            len(command.body),
        )
        if head is not None:
            return head
    return encode_head_in_python(command)


def encode_head_in_python(command: RemotingCommand) -> bytes:
    """What ``encode_head`` makes: its specification."""
    if command.serialize_type == SERIALIZE_JSON:
        header = _json_header(command)
    elif command.serialize_type == SERIALIZE_ROCKETMQ:
        header = _binary_header(command)
    else:
        raise ValueError(f"serialize type {command.serialize_type} is neither JSON nor ROCKETMQ")
    length = len(header)
    if length > HEADER_LENGTH_MASK:
        raise ValueError(f"a header of {length} bytes does not fit the frame's 24-bit length")
    return (
        FRAME_HEAD.pack(4 + length + len(command.body), command.serialize_type << 24 | length)
        + header
    )


def _strings(fields: dict[str, str]) -> dict[str, str]:
    """Ext fields as strings (the Go client unmarshals them into ``map[string]string``)."""
    if all(type(value) is str for value in fields.values()):
        return fields
    return {name: _java_text(value) for name, value in fields.items() if value is not None}


def _json_header(command: RemotingCommand) -> bytes:
    """The header as JSON, in these fields' order, ``remark`` and ``extFields`` only when
    set: the bytes ``json.dumps`` makes of that object with compact separators (the test
    holds the two equal), written out here because an answer's header is made on every
    request and building the object first cost as much again."""
    text = (
        f'{{"code":{int(command.code)},"flag":{int(command.flag)},'
        f'"language":{_json_string(command.language)},"opaque":{int(command.opaque)},'
        f'"serializeTypeCurrentRPC":"JSON","version":{int(command.version)}'
    )
    if command.remark:
        text += ',"remark":' + _json_string(command.remark)
    if command.ext_fields:
        text += ',"extFields":' + _json_fields(command.ext_fields)
    return (text + "}").encode()


def _json_fields(fields: dict[str, str]) -> str:
    """Ext fields as a JSON object of strings (``_strings``'s values)."""
    members = []
    for name, value in fields.items():
        if type(value) is not str:
            if value is None:
                continue
            value = _java_text(value)
        members.append(_json_string(name) + ":" + _json_string(value))
    return "{" + ",".join(members) + "}"


def _binary_header(command: RemotingCommand) -> bytes:
    if not INT16_MIN <= command.code <= INT16_MAX:
        raise ValueError(f"code {command.code} does not fit the binary header (JSON only)")
    if not INT16_MIN <= command.version <= INT16_MAX:
        raise ValueError(f"version {command.version} does not fit the binary header")
    remark = command.remark.encode() if command.remark else b""
    parts = [
        BINARY_FIXED.pack(
            command.code,
            LANGUAGE_ORDINALS.get(command.language, _OTHER_ORDINAL),
            command.version,
            command.opaque,
            command.flag,
            len(remark),
        ),
        remark,
        b"",  # the ext fields' length, once known
    ]
    size = 0
    for name, value in _strings(command.ext_fields).items():
        key, text = name.encode(), value.encode()
        if len(key) > INT16_MAX:
            raise ValueError(f"ext field name of {len(key)} bytes does not fit the binary header")
        parts.append(INT16.pack(len(key)) + key + INT32.pack(len(text)) + text)
        size += 6 + len(key) + len(text)
    parts[2] = INT32.pack(size)
    return b"".join(parts)


# ---- decoding -------------------------------------------------------------------------
def frame_length(prefix: bytes | bytearray | memoryview, max_frame_bytes: int) -> int:
    """The total length a frame announces in its first 4 bytes, checked before anything
    more of it is read."""
    (length,) = FRAME_LENGTH.unpack_from(prefix)
    if length > max_frame_bytes:
        raise FrameTooLarge(f"frame of {length} bytes announced, the limit is {max_frame_bytes}")
    if length < MIN_FRAME_LENGTH:
        raise FrameLengthInvalid(
            f"frame length {length}: a frame holds at least its {MIN_FRAME_LENGTH}-byte mark"
        )
    return length


def decode(frame: bytes, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES) -> RemotingCommand:
    """The command in ``frame``: the bytes after the total length (the mark, header and
    body), as ``FrameSplitter`` hands them out."""
    if len(frame) < MIN_FRAME_LENGTH:
        raise FrameLengthInvalid(f"frame of {len(frame)} bytes has no room for its mark")
    (mark,) = MARK.unpack_from(frame)
    serialize_type, header_length = mark >> 24, mark & HEADER_LENGTH_MASK
    end = MIN_FRAME_LENGTH + header_length
    if end > len(frame):
        raise FrameLengthInvalid(
            f"header length {header_length} runs past the frame's {len(frame) - 4} bytes"
        )
    if header_length > max_header_bytes:
        raise HeaderTooLarge(f"header of {header_length} bytes, the limit is {max_header_bytes}")
    header, body = frame[MIN_FRAME_LENGTH:end], frame[end:]
    if serialize_type == SERIALIZE_JSON:
        return _from_json(header, body)
    if serialize_type == SERIALIZE_ROCKETMQ:
        return _from_binary(header, body)
    raise UnknownSerializeType(
        f"serialize type {serialize_type} is neither 0 (JSON) nor 1 (ROCKETMQ)"
    )


def decode_frame(data: bytes, max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES) -> RemotingCommand:
    """One whole frame, total length included (what ``encode`` returns)."""
    if len(data) < FRAME_LENGTH.size:
        raise FrameLengthInvalid(f"{len(data)} bytes hold no frame length")
    length = frame_length(data, max(len(data), MIN_FRAME_LENGTH))
    if length != len(data) - FRAME_LENGTH.size:
        raise FrameLengthInvalid(f"frame announces {length} bytes and has {len(data) - 4}")
    return decode(data[FRAME_LENGTH.size :], max_header_bytes)


def _json_number(raw: dict, name: str, opaque: int | None, low: int, high: int) -> int:
    value = raw.get(name)
    if type(value) is int and low <= value <= high:
        return value  # what every client sends
    if value is None:
        return 0  # as Java leaves a field the JSON does not name
    number = value if type(value) is int else None
    if type(value) is str:
        number = _parse_integer(value)
    if number is None:
        raise MalformedHeader(f"header field {name}={value!r} is not an integer", opaque)
    if not low <= number <= high:
        raise MalformedHeader(f"header field {name}={number} is outside {low}..{high}", opaque)
    return number


def parse_json_header(header: bytes) -> object:
    """``json.loads(header)``, its checks and errors included. A header that opens an
    object in UTF-8 (every client's) goes straight to the C scanner: ``json.loads`` first
    guesses the encoding and wraps the scan in Python, which cost a third again of it."""
    if header[:1] == b"{" and header[-1:] == b"}" and header[1:2] != b"\x00":
        try:
            text = header.decode("utf-8", "surrogatepass")
            value, end = _SCAN_JSON(text, 0)
        except (ValueError, StopIteration):
            pass  # json.loads below says what is wrong, as it always did
        else:
            if end == len(text):
                return value
    return json.loads(header)


def _from_json(header: bytes, body: bytes) -> RemotingCommand:
    try:
        raw = parse_json_header(header)
    except ValueError as error:  # UnicodeDecodeError included
        raise MalformedHeader(f"header is not JSON: {error}") from None
    except RecursionError:
        # A header nested past the parser's recursion limit (``[[[[...``): unreadable,
        # and no opaque is known. RocketMQ's own headers nest two levels.
        raise MalformedHeader(
            f"header is JSON nested too deeply to read ({len(header)} bytes; a RocketMQ "
            "header nests two levels)"
        ) from None
    if type(raw) is not dict:
        raise MalformedHeader(f"header is JSON {type(raw).__name__}, not an object")
    opaque = _json_number(raw, "opaque", None, INT32_MIN, INT32_MAX)
    if raw.get("code") is None:
        raise MalformedHeader("header has no code", opaque)
    code = _json_number(raw, "code", opaque, INT32_MIN, INT32_MAX)
    flag = _json_number(raw, "flag", opaque, INT32_MIN, INT32_MAX)
    version = _json_number(raw, "version", opaque, INT32_MIN, INT32_MAX)
    language = raw.get("language")
    if language is None:
        language = "JAVA"
    elif type(language) is int:
        if not 0 <= language < len(LANGUAGES):
            raise MalformedHeader(f"header field language={language} is no language", opaque)
        language = LANGUAGES[language]
    elif type(language) is not str or len(language) > 32:
        raise MalformedHeader(f"header field language={language!r} is no language", opaque)
    remark = raw.get("remark")
    if remark is not None and type(remark) is not str:
        raise MalformedHeader(f"header field remark={remark!r} is not a string", opaque)
    fields = raw.get("extFields")
    if fields is None:
        fields = {}
    elif type(fields) is not dict:
        raise MalformedHeader("header field extFields is not an object", opaque)
    elif {*map(type, fields.values())} - _STR_TYPE:
        try:
            fields = {name: _java_text(v) for name, v in fields.items() if v is not None}
        except TypeError as error:
            raise MalformedHeader(f"header field extFields: {error}", opaque) from None
    return RemotingCommand(
        code, opaque, flag, remark, fields, body, language, version, SERIALIZE_JSON
    )


def _java_text(value: object) -> str:
    """An ext field value as Java's ``String.valueOf`` would write it (ali-ons sends bare
    numbers and booleans)."""
    if type(value) is str:
        return value
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    if type(value) is float:
        return str(int(value)) if value.is_integer() else repr(value)
    raise TypeError(f"a value of type {type(value).__name__} is no header field")


def _from_binary(header: bytes, body: bytes) -> RemotingCommand:
    """The command of a binary header, read in C (``read_binary_header``); a header the C
    declines is read by ``_from_binary_in_python``, its twin, which says what is wrong."""
    fields = _speedups.read_binary_header(header, LANGUAGES, "OTHER")
    if fields is None:
        return _from_binary_in_python(header, body)
    code, opaque, flag, remark, ext_fields, language, version = fields
    return RemotingCommand(
        code, opaque, flag, remark, ext_fields, body, language, version, SERIALIZE_ROCKETMQ
    )


def _from_binary_in_python(header: bytes, body: bytes) -> RemotingCommand:
    """What ``_from_binary`` reads: its specification."""
    size = len(header)
    if size < BINARY_FIXED.size:
        # Opaque sits at bytes 5..8: known if the header reaches that far.
        opaque = INT32.unpack_from(header, 5)[0] if size >= 9 else None
        raise MalformedHeader(
            f"binary header of {size} bytes, its fixed part is {BINARY_FIXED.size}", opaque
        )
    code, language, version, opaque, flag, remark_length = BINARY_FIXED.unpack_from(header)
    position = BINARY_FIXED.size
    if not 0 <= remark_length <= size - position - INT32.size:
        raise MalformedHeader(
            f"binary header: remark of {remark_length} bytes runs past the header", opaque
        )
    try:
        remark = header[position : position + remark_length].decode() if remark_length else None
        position += remark_length
        (fields_length,) = INT32.unpack_from(header, position)
        position += INT32.size
        if fields_length != size - position:
            raise MalformedHeader(
                f"binary header: ext fields of {fields_length} bytes, {size - position} follow",
                opaque,
            )
        fields = {}
        while position < size:
            (key_length,) = INT16.unpack_from(header, position)
            position += INT16.size
            key_end = position + key_length
            if key_length <= 0 or key_end + INT32.size > size:
                raise MalformedHeader(
                    f"binary header: ext field name of {key_length} bytes at byte {position}",
                    opaque,
                )
            key = header[position:key_end].decode()
            (value_length,) = INT32.unpack_from(header, key_end)
            position = key_end + INT32.size
            if not 0 <= value_length <= size - position:
                raise MalformedHeader(
                    f"binary header: value of {key} ({value_length} bytes) runs past the header",
                    opaque,
                )
            fields[key] = header[position : position + value_length].decode()
            position += value_length
    except UnicodeDecodeError as error:
        raise MalformedHeader(
            f"binary header: text is not UTF-8 ({error.reason})", opaque
        ) from None
    except struct.error:
        raise MalformedHeader("binary header: an ext field is cut short", opaque) from None
    name = LANGUAGES[language] if language < len(LANGUAGES) else "OTHER"
    return RemotingCommand(
        code, opaque, flag, remark, fields, body, name, version, SERIALIZE_ROCKETMQ
    )


class FrameSplitter:
    """Cuts a byte stream into frames. A frame's announced length is checked as soon as
    its 4 bytes arrive, before any of the frame is kept (``FrameTooLarge``), so a peer
    cannot make a connection buffer more than one frame of at most ``max_frame_bytes``.

    Not thread-safe: one per connection, fed by the connection's reads."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """The frames ``data`` completes (each without its total length, as ``decode``
        takes them); the rest is kept for the next call."""
        buffer = self._buffer
        if buffer:
            buffer += data
            data = buffer
        frames = []
        position, end = 0, len(data)
        limit = self.max_frame_bytes
        # Frames are cut from a view: one copy each (a slice of the buffer, then its bytes,
        # would be two). The view is released before the buffer is resized.
        with memoryview(data) as view:
            while end - position >= FRAME_LENGTH.size:
                (length,) = FRAME_LENGTH.unpack_from(data, position)
                if not MIN_FRAME_LENGTH <= length <= limit:
                    frame_length(data[position : position + FRAME_LENGTH.size], limit)
                stop = position + FRAME_LENGTH.size + length
                if stop > end:
                    break
                frames.append(view[position + FRAME_LENGTH.size : stop].tobytes())
                position = stop
            if data is not buffer and position < end:
                self._buffer = bytearray(view[position:])
        if data is buffer and position:
            del buffer[:position]
        return frames
