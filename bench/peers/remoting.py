"""The few RocketMQ remoting calls the benchmark makes to Apache RocketMQ from Python,
where one ``mqadmin`` JVM per call would be far too slow (10,000 topics) or would add a
JVM start to what is timed (finding the master before a kill). Frames are ferrymq's
remoting codec (``ferrymq.codec.remoting``), JSON headers, one connection per call.
"""

from __future__ import annotations

import itertools
import json
import re
import socket

from ferrymq.codec.errors import CodecError
from ferrymq.codec.remoting import FRAME_LENGTH, RemotingCommand, decode, encode, frame_length
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode

UPDATE_AND_CREATE_TOPIC_LIST = 18  # to a master broker; body {"topicConfigList": [...]}
GET_ROUTEINFO_BY_TOPIC = RequestCode.GET_ROUTEINFO_BY_TOPIC  # to the name server; "topic"
GET_BROKER_CLUSTER_INFO = RequestCode.GET_BROKER_CLUSTER_INFO  # to the name server
VERSION = 479  # V5_3_3
MAX_ANSWER_BYTES = 64 << 20  # a route or cluster table of 10,000 topics fits
_opaque = itertools.count(1)


class RemotingError(RuntimeError):
    pass


def request(code: int, fields: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
    fields = {k: str(v) for k, v in (fields or {}).items()}
    return RemotingCommand(
        code, next(_opaque), ext_fields=fields, body=body, language="PYTHON", version=VERSION
    )


def read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise RemotingError("connection closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_command(sock: socket.socket) -> RemotingCommand:
    """The next whole frame on ``sock``; a frame the codec refuses is a ``RemotingError``."""
    try:
        length = frame_length(read_exactly(sock, FRAME_LENGTH.size), MAX_ANSWER_BYTES)
        return decode(read_exactly(sock, length))
    except CodecError as error:
        raise RemotingError(f"bad answer: {error}") from error


def call(
    address: str,
    code: int,
    fields: dict[str, str] | None = None,
    body: bytes = b"",
    timeout_s: float = 30.0,
) -> RemotingCommand:
    """One request on a connection of its own: the answer; a code other than SUCCESS
    raises ``RemotingError`` with the remark."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(encode(request(code, fields, body)))
        answer = read_command(sock)
    if answer.code != ResponseCode.SUCCESS:
        raise RemotingError(f"request {code} to {address}: code {answer.code}: {answer.remark}")
    return answer


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
    answer = call(namesrv, GET_BROKER_CLUSTER_INFO, timeout_s=timeout_s)
    return broker_addresses(lenient_json(answer.body), broker_name).get(0)


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
