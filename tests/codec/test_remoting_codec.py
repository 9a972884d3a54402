"""The remoting frame codec (ferrymq/codec/remoting.py) and the 4.x batch and properties
codec (ferrymq/codec/remoting_messages.py): round trips in both header forms, the bytes
4.x clients send, and every way a frame can be malformed."""

from __future__ import annotations

import dataclasses
import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferrymq.codec import _speedups
from ferrymq.codec import remoting as remoting_codec
from ferrymq.codec.errors import InvalidMessageError
from ferrymq.codec.remoting import (
    BINARY_FIXED,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    FrameLengthInvalid,
    FrameSplitter,
    FrameTooLarge,
    HeaderFieldError,
    HeaderTooLarge,
    MalformedHeader,
    RemotingCommand,
    UnknownSerializeType,
    decode,
    decode_frame,
    encode,
    encode_head,
    encode_head_in_python,
    parse_json_header,
)
from ferrymq.codec.remoting_codes import LANGUAGES
from ferrymq.codec.remoting_messages import (
    BatchedMessage,
    MalformedBatch,
    decode_batch,
    encode_batch,
    parse_sent_properties,
)

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
int32 = st.integers(-(2**31), 2**31 - 1)
int16 = st.integers(-(2**15), 2**15 - 1)
# The machine is shared: no per-example deadline, and few enough examples to stay quick.
quick = settings(deadline=None, max_examples=60)
# Examples of the longer twin checks in make test; their native fuzz targets
# (tests/support/native_fuzz.py) take these parsers much further in make fuzz.
TWIN_EXAMPLES = 600


@st.composite
def commands(draw, serialize_type: int):
    small = int16 if serialize_type == SERIALIZE_ROCKETMQ else int32
    return RemotingCommand(
        code=draw(small),
        opaque=draw(int32),
        flag=draw(st.sampled_from([0, FLAG_RESPONSE, FLAG_ONEWAY])),
        remark=draw(st.none() | text.filter(bool)),
        ext_fields=draw(st.dictionaries(text.filter(bool), text, max_size=6)),
        body=draw(st.binary(max_size=200)),
        language=draw(st.sampled_from(LANGUAGES)),
        version=draw(small),
        serialize_type=serialize_type,
    )


@quick
@given(commands(SERIALIZE_JSON))
def test_json_frames_round_trip(command):
    assert decode_frame(encode(command)) == command


@quick
@given(commands(SERIALIZE_ROCKETMQ))
def test_binary_frames_round_trip(command):
    assert decode_frame(encode(command)) == command


@quick
@given(st.lists(commands(SERIALIZE_JSON) | commands(SERIALIZE_ROCKETMQ), max_size=8), st.data())
def test_the_splitter_cuts_any_chunking_into_the_frames_sent(sent, data):
    stream = b"".join(encode(command) for command in sent)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    splitter, frames = FrameSplitter(), []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        frames += splitter.feed(stream[start:end])
    assert [decode(frame) for frame in frames] == sent and splitter.buffered == 0


def json_frame(header: dict | bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return (
        struct.pack(">iI", 4 + len(raw) + len(body), serialize_type << 24 | len(raw)) + raw + body
    )


def test_a_java_clients_json_header_reads_as_sent():
    """What the 4.x Java client writes: extFields as strings, serializeTypeCurrentRPC, no
    remark; the body follows the header."""
    header = (
        b'{"code":310,"extFields":{"a":"P","b":"T","e":"1","g":"1700000000000"},'
        b'"flag":0,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON",'
        b'"version":407}'
    )
    command = decode_frame(json_frame(header, b"hello"))
    assert (command.code, command.opaque, command.flag, command.version) == (310, 7, 0, 407)
    assert command.ext_fields == {"a": "P", "b": "T", "e": "1", "g": "1700000000000"}
    assert command.body == b"hello" and command.remark is None and command.language == "JAVA"
    assert command.int32("e") == 1 and command.integer("g") == 1700000000000


def test_ali_ons_bare_numbers_and_booleans_read_as_java_prints_them():
    header = {"code": 10, "opaque": 1, "language": 0, "extFields": {"queueId": 3, "unitMode": False,
              "ratio": 1.5, "whole": 2.0, "absent": None}}  # fmt: skip
    command = decode_frame(json_frame(header))
    assert command.ext_fields == {"queueId": "3", "unitMode": "false", "ratio": "1.5", "whole": "2"}
    assert command.language == "JAVA"


def test_answers_are_json_with_string_ext_fields_and_no_empty_remark():
    reply = RemotingCommand(105, opaque=9).reply(0, ext_fields={"offset": "12"})
    raw = encode(reply)
    header = json.loads(raw[8 : 8 + (struct.unpack(">I", raw[4:8])[0] & 0xFFFFFF)])
    assert header["flag"] == FLAG_RESPONSE and header["opaque"] == 9
    assert header["extFields"] == {"offset": "12"} and "remark" not in header


@quick
@given(
    commands(SERIALIZE_JSON),
    st.sampled_from(LANGUAGES) | text,
    st.dictionaries(text.filter(bool), st.none() | st.booleans() | int32 | text, max_size=6),
)
def test_a_json_header_is_what_json_dumps_makes_of_the_header_object(command, language, fields):
    """The header written field by field is byte for byte ``json.dumps`` of the header as
    an object (ASCII escapes, compact separators, the fields in this order); ext field
    values that are not strings are written as Java prints them, None ones left out."""
    command = dataclasses.replace(command, language=language, ext_fields=fields)
    as_java = {True: "true", False: "false"}
    header: dict[str, object] = {
        "code": command.code,
        "flag": command.flag,
        "language": command.language,
        "opaque": command.opaque,
        "serializeTypeCurrentRPC": "JSON",
        "version": command.version,
    }
    if command.remark:
        header["remark"] = command.remark
    written = {
        name: as_java[value] if type(value) is bool else str(value)
        for name, value in fields.items()
        if value is not None
    }
    if fields:
        header["extFields"] = written
    raw = encode(command)
    length = struct.unpack(">I", raw[4:8])[0] & 0xFFFFFF
    assert raw[8 : 8 + length] == json.dumps(header, separators=(",", ":")).encode()


json_values = st.recursive(
    st.none() | st.booleans() | int32 | st.floats(allow_nan=False) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)


def outcome(read, header: bytes) -> object:
    try:
        return ("value", read(header))
    except (ValueError, RecursionError) as error:
        return (type(error).__name__, str(error))


@settings(deadline=None, max_examples=300)
@given(st.data())
def test_a_header_reads_as_json_loads_reads_it_errors_included(data):
    """The scanner's shortcut (``parse_json_header``) answers what ``json.loads`` answers, for
    headers as clients write them, cut or grown at either end, and for any bytes."""
    written = json.dumps(data.draw(st.dictionaries(text, json_values, max_size=5)))
    header = data.draw(
        st.sampled_from(
            [
                written.encode(),
                written.encode("utf-16-le"),
                written.encode()[: data.draw(st.integers(0, len(written)))],
                written.encode() + data.draw(st.sampled_from([b" ", b"}", b"x", b"\n"])),
                b"{" + data.draw(st.binary(max_size=40)) + b"}",
                data.draw(st.binary(max_size=40)),
            ]
        )
    )
    assert outcome(parse_json_header, header) == outcome(json.loads, header)


def test_a_reply_keeps_the_requests_serialize_type():
    request = RemotingCommand(11, opaque=3, serialize_type=SERIALIZE_ROCKETMQ)
    assert decode_frame(encode(request.reply(19, "none"))).serialize_type == SERIALIZE_ROCKETMQ


def test_binary_headers_carry_no_code_past_int16():
    with pytest.raises(ValueError, match="JSON only"):
        encode(RemotingCommand(200050, serialize_type=SERIALIZE_ROCKETMQ))
    assert decode_frame(encode(RemotingCommand(200050))).code == 200050


@pytest.mark.parametrize(
    ("frame", "error", "opaque", "words"),
    [
        # The total length is checked before anything is buffered.
        (struct.pack(">i", 17 << 20), FrameTooLarge, None, "limit is 16777216"),
        (struct.pack(">i", 2), FrameLengthInvalid, None, "at least"),
        (struct.pack(">i", -1), FrameLengthInvalid, None, "at least"),
    ],
)
def test_the_splitter_refuses_a_bad_length_at_once(frame, error, opaque, words):
    with pytest.raises(error, match=words):
        FrameSplitter().feed(frame)


def test_a_header_length_past_the_frame_is_refused():
    frame = struct.pack(">iI", 8, 100) + b"{}{}"
    with pytest.raises(FrameLengthInvalid, match="runs past"):
        decode_frame(frame)


def test_a_header_over_the_header_limit_is_refused():
    with pytest.raises(HeaderTooLarge, match="limit is 16"):
        decode(encode(RemotingCommand(10, ext_fields={"k": "v" * 64}))[4:], max_header_bytes=16)


def test_an_unknown_serialize_type_is_refused():
    with pytest.raises(UnknownSerializeType, match="serialize type 2") as raised:
        decode_frame(json_frame({"code": 10, "opaque": 1}, serialize_type=2))
    assert raised.value.opaque is None


@pytest.mark.parametrize(
    ("header", "opaque", "words"),
    [
        (b"not json", None, "not JSON"),
        (b"\xff\xfe", None, "not JSON"),
        (b"[1, 2]", None, "not an object"),
        ({"opaque": "x", "code": 10}, None, "opaque='x' is not an integer"),
        ({"opaque": 5}, 5, "no code"),
        ({"opaque": 5, "code": "ten"}, 5, "code='ten' is not an integer"),
        ({"opaque": 5, "code": 1.5}, 5, "code=1.5 is not an integer"),
        ({"opaque": 5, "code": 2**40}, 5, "outside"),
        ({"opaque": 5, "code": 10, "flag": True}, 5, "flag=True"),
        ({"opaque": 5, "code": 10, "language": 99}, 5, "no language"),
        ({"opaque": 5, "code": 10, "remark": 3}, 5, "remark=3"),
        ({"opaque": 5, "code": 10, "extFields": []}, 5, "extFields is not an object"),
        ({"opaque": 5, "code": 10, "extFields": {"a": [1]}}, 5, "extFields"),
    ],
)
def test_every_malformed_json_header_says_what_and_whether_its_opaque_is_known(
    header, opaque, words
):
    with pytest.raises(MalformedHeader, match=words) as raised:
        decode_frame(json_frame(header))
    assert raised.value.opaque == opaque


def test_a_json_header_nested_past_the_recursion_limit_is_a_frame_error_without_opaque():
    """It raised RecursionError, which escaped the connection with a traceback per frame;
    no opaque can be known, so the connection is closed, saying why."""
    with pytest.raises(MalformedHeader, match="nested too deeply") as raised:
        decode_frame(json_frame(b"[" * 100_000))
    assert raised.value.opaque is None


def binary_frame(header: bytes) -> bytes:
    return struct.pack(">iI", 4 + len(header), 1 << 24 | len(header)) + header


@pytest.mark.parametrize(
    ("header", "opaque", "words"),
    [
        (b"\x00\x0a\x00", None, "fixed part"),
        (BINARY_FIXED.pack(10, 0, 0, 77, 0, 0)[:12], 77, "fixed part"),
        (BINARY_FIXED.pack(10, 0, 0, 77, 0, 50) + b"\x00" * 4, 77, "remark of 50 bytes"),
        (BINARY_FIXED.pack(10, 0, 0, 77, 0, 0) + struct.pack(">i", 9), 77, "ext fields of 9"),
        (
            BINARY_FIXED.pack(10, 0, 0, 77, 0, 0) + struct.pack(">ih", 4, 9) + b"ab",
            77,
            "name of 9 bytes",
        ),
        (
            BINARY_FIXED.pack(10, 0, 0, 77, 0, 0) + struct.pack(">ihsi", 7, 1, b"k", 99),
            77,
            "runs past",
        ),
        (
            BINARY_FIXED.pack(10, 0, 0, 77, 0, 2) + b"\xff\xff" + struct.pack(">i", 0),
            77,
            "not UTF-8",
        ),
    ],
)
def test_every_malformed_binary_header_is_refused(header, opaque, words):
    with pytest.raises(MalformedHeader, match=words) as raised:
        decode_frame(binary_frame(header))
    assert raised.value.opaque == opaque


def result_of(call):
    """What a call returns, or the type, text and opaque of what it raises."""
    try:
        return call()
    except Exception as error:  # compared: C and twin must fail alike
        return type(error).__name__, str(error), getattr(error, "opaque", None)


@st.composite
def binary_headers(draw):
    """Binary headers as a client writes them, then perhaps cut, grown or overwritten."""
    command = draw(commands(SERIALIZE_ROCKETMQ))
    header = bytearray(encode_head_in_python(command)[8:])
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(header)))
        change = draw(st.sampled_from(["cut", "byte", "insert"]))
        if change == "cut":
            del header[at:]
        elif change == "byte" and at < len(header):
            header[at] = draw(st.integers(0, 255))
        else:
            header[at:at] = draw(st.binary(min_size=1, max_size=4))
    return bytes(header)


@settings(deadline=None, max_examples=TWIN_EXAMPLES)
@given(binary_headers() | st.binary(max_size=64))
def test_a_binary_header_reads_in_c_as_its_twin_reads_it_errors_included(header):
    body = b"body"
    assert result_of(lambda: remoting_codec._from_binary(header, body)) == result_of(
        lambda: remoting_codec._from_binary_in_python(header, body)
    )


def test_the_c_reads_a_clients_binary_header_and_declines_a_malformed_one():
    """The pair above compares outcomes: this shows the C is what reads a usual header."""
    command = RemotingCommand(
        310, 7, 0, "r", {"topic": "T", "queueId": "3"}, b"", "PYTHON", 4, SERIALIZE_ROCKETMQ
    )
    header = encode(command)[8:]
    assert _speedups.read_binary_header(header, LANGUAGES, "OTHER") == (
        310,
        7,
        0,
        "r",
        {"topic": "T", "queueId": "3"},
        "PYTHON",
        4,
    )
    assert _speedups.read_binary_header(header[:-1], LANGUAGES, "OTHER") is None
    assert _speedups.read_binary_header(header[:12], LANGUAGES, "OTHER") is None


odd_values = st.one_of(
    text,
    st.none(),
    st.integers(-(2**40), 2**40),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.just("\ud800"),  # a lone surrogate: not UTF-8
)


@st.composite
def odd_commands(draw):
    """Commands the node or the SDK might hand the encoder, fields out of range included."""
    command = draw(commands(SERIALIZE_ROCKETMQ))
    return dataclasses.replace(
        command,
        code=draw(int16 | st.integers(-(2**20), 2**20)),
        opaque=draw(int32 | st.integers(-(2**40), 2**40)),
        version=draw(int16 | st.integers(-(2**20), 2**20) | st.booleans()),
        remark=draw(st.none() | text | st.just("\udfff") | st.just(0)),
        ext_fields=draw(st.dictionaries(text | st.just("\ud800"), odd_values, max_size=4)),
        language=draw(st.sampled_from(LANGUAGES) | text),
    )


@settings(deadline=None, max_examples=TWIN_EXAMPLES)
@given(commands(SERIALIZE_ROCKETMQ) | odd_commands())
def test_a_binary_head_is_written_in_c_as_its_twin_writes_it_errors_included(command):
    def raised(call):
        found = result_of(call)
        return found[:2] if isinstance(found, tuple) else found

    assert raised(lambda: encode_head(command)) == raised(lambda: encode_head_in_python(command))


def test_the_c_writes_a_usual_binary_head_and_declines_what_the_twin_converts():
    fields = {"msgId": "0A0B", "queueOffset": "12"}
    assert _speedups.binary_head(0, 0, 0, 9, 1, None, fields, 5) == encode_head_in_python(
        RemotingCommand(0, 9, 1, None, fields, b"12345", "JAVA", 0, SERIALIZE_ROCKETMQ)
    )
    assert _speedups.binary_head(0, 0, 0, 9, 1, None, {"queueOffset": 12}, 0) is None
    assert _speedups.binary_head(1 << 15, 0, 0, 9, 1, None, {}, 0) is None
    assert _speedups.binary_head(0, 0, 0, 9, 1, "\ud800", {}, 0) is None


def test_header_fields_name_what_is_missing_or_wrong():
    command = RemotingCommand(11, ext_fields={"queueId": "x1", "offset": "9", "big": "99999999999"})
    with pytest.raises(HeaderFieldError, match="queueOffset is missing"):
        command.integer("queueOffset")
    with pytest.raises(HeaderFieldError, match=r"queueId='x1' is not an integer"):
        command.int32("queueId")
    with pytest.raises(HeaderFieldError, match="outside"):
        command.int32("big")
    with pytest.raises(HeaderFieldError, match="topic is missing"):
        command.text("topic")
    assert command.integer("offset") == 9 and command.int32("absent", 5) == 5
    for bad in (" 9", "9 ", "1_0", "٣", "+", "0x1"):
        with pytest.raises(HeaderFieldError, match="not an integer"):
            RemotingCommand(1, ext_fields={"n": bad}).integer("n")
    assert RemotingCommand(1, ext_fields={"n": ""}).integer("n", -7) == -7
    assert RemotingCommand(1, ext_fields={"n": "-12"}).integer("n") == -12


@quick
@given(
    st.lists(
        st.builds(
            BatchedMessage,
            flag=int32,
            body=st.binary(max_size=100),
            properties=st.binary(max_size=50),
        ),
        min_size=1,
        max_size=10,
    )
)
def test_batches_round_trip(messages):
    assert decode_batch(encode_batch(messages), 100) == messages


def test_a_batch_that_is_not_whole_messages_is_refused_naming_where():
    good = encode_batch([BatchedMessage(0, b"one", b"a\x01b"), BatchedMessage(0, b"two", b"")])
    with pytest.raises(MalformedBatch, match="message 1 at byte 28"):
        decode_batch(good[:-3], 100)
    with pytest.raises(MalformedBatch, match="total size"):
        decode_batch(struct.pack(">i", 99) + good[4:], 100)
    with pytest.raises(MalformedBatch, match="no message"):
        decode_batch(b"", 100)
    with pytest.raises(MalformedBatch, match="more than 1"):
        decode_batch(good, 1)
    with pytest.raises(MalformedBatch, match="body of -5 bytes"):
        decode_batch(struct.pack(">iiiii", 22, 0, 0, 0, -5) + b"\x00\x00", 100)


def test_sent_properties_with_or_without_the_trailing_separator():
    assert parse_sent_properties(b"TAGS\x01a\x02KEYS\x01k1 k2") == {"TAGS": "a", "KEYS": "k1 k2"}
    assert parse_sent_properties("TAGS\x01a\x02KEYS\x01k\x02") == {"TAGS": "a", "KEYS": "k"}
    assert parse_sent_properties(b"") == {}
    for bad in (b"TAGS", b"\x01value", b"a\x01b\x01c", b"\xff\x01x"):
        with pytest.raises(InvalidMessageError) as raised:
            parse_sent_properties(bad)
        assert raised.value.reason == "PROPERTY_INVALID"
