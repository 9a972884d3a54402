"""The few RocketMQ remoting calls the benchmark makes to Apache RocketMQ from Python,
where one ``mqadmin`` JVM per call would be far too slow (10,000 topics) or would add a
JVM start to what is timed (finding the master before a kill).

A frame: a 4-byte big-endian length of what follows, 4 bytes whose high byte is the
header's serialisation (0 = JSON) and low 24 bits its length, the JSON header, the body.
Written from the protocol's description (``RemotingCommand``), not from any client.
"""

from __future__ import annotations

import itertools
import json
import re
import socket
import struct

UPDATE_AND_CREATE_TOPIC_LIST = 18  # to a master broker; body {"topicConfigList": [...]}
GET_ROUTEINFO_BY_TOPIC = 105  # to the name server; field "topic"
GET_BROKER_CLUSTER_INFO = 106  # to the name server
SUCCESS = 0
VERSION = 479  # V5_3_3
_opaque = itertools.count(1)


class RemotingError(RuntimeError):
    pass


def encode(code: int, fields: dict[str, str] | None = None, body: bytes = b"") -> bytes:
    header = {
        "code": code,
        "language": "PYTHON",
        "version": VERSION,
        "opaque": next(_opaque),
        "flag": 0,
        "extFields": {k: str(v) for k, v in (fields or {}).items()},
    }
    encoded = json.dumps(header, separators=(",", ":")).encode()
    return (
        struct.pack(">II", 4 + len(encoded) + len(body), len(encoded) & 0xFFFFFF) + encoded + body
    )


def decode(frame: bytes) -> tuple[dict, bytes]:
    """A frame without its length prefix: (header, body)."""
    (marker,) = struct.unpack_from(">I", frame)
    if marker >> 24 != 0:
        raise RemotingError(f"serialisation {marker >> 24} (only JSON is read here)")
    length = marker & 0xFFFFFF
    return json.loads(frame[4 : 4 + length]), frame[4 + length :]


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise RemotingError("connection closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def call(
    address: str,
    code: int,
    fields: dict[str, str] | None = None,
    body: bytes = b"",
    timeout_s: float = 30.0,
) -> tuple[dict, bytes]:
    """One request on a connection of its own: the answer's (header, body); a code other
    than SUCCESS raises ``RemotingError`` with the remark."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(encode(code, fields, body))
        (length,) = struct.unpack(">I", _read_exactly(sock, 4))
        header, answer = decode(_read_exactly(sock, length))
    if header.get("code") != SUCCESS:
        raise RemotingError(
            f"request {code} to {address}: code {header.get('code')}: {header.get('remark')}"
        )
    return header, answer


_BARE_INT_KEY = re.compile(r"([{,])\s*(-?\d+)\s*:")


def lenient_json(body: bytes) -> dict:
    """fastjson writes maps with integer keys unquoted (``{0:"127.0.0.1:10911"}``)."""
    return json.loads(_BARE_INT_KEY.sub(r'\1"\2":', body.decode()))


def broker_addresses(cluster_info: dict, broker_name: str) -> dict[int, str]:
    """``{broker id: address}`` of one broker group (id 0 is the master)."""
    table = cluster_info.get("brokerAddrTable", {}).get(broker_name, {})
    return {int(k): v for k, v in table.get("brokerAddrs", {}).items()}


def master_address(namesrv: str, broker_name: str, timeout_s: float = 5.0) -> str | None:
    """The address the name server lists as ``broker_name``'s master, or None."""
    _, body = call(namesrv, GET_BROKER_CLUSTER_INFO, timeout_s=timeout_s)
    return broker_addresses(lenient_json(body), broker_name).get(0)


def has_route(namesrv: str, topic: str, timeout_s: float = 5.0) -> bool:
    """Whether the name server has a route for ``topic`` (it answers 17 when not)."""
    try:
        call(namesrv, GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, timeout_s=timeout_s)
        return True
    except RemotingError:
        return False


def topic_config(name: str, queues: int) -> dict:
    return {
        "topicName": name,
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": 6,  # read and write
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
        "attributes": {},
    }


def create_topics(broker: str, names: list[str], queues: int, timeout_s: float = 60.0) -> None:
    """Create (or update) ``names`` on one broker in a single request; the broker then
    registers them with the name server."""
    body = json.dumps({"topicConfigList": [topic_config(n, queues) for n in names]}).encode()
    call(broker, UPDATE_AND_CREATE_TOPIC_LIST, body=body, timeout_s=timeout_s)
