"""The few RocketMQ remoting calls the benchmark makes to Apache RocketMQ from Python,
where one ``mqadmin`` JVM per call would be far too slow (10,000 topics) or would add a
JVM start to what is timed (finding the master before a kill). Frames are ferrymq's
remoting codec (``ferrymq.codec.remoting``), JSON headers, one connection per call.

The backlog (``send_batches``, ``pull_all``) is written and read straight from the master
broker over its remoting port, as a 4.x client does (``SEND_BATCH_MESSAGE``, then
``PULL_MESSAGE`` of up to 32 messages per queue, one pull in flight per queue): the
official Python client through the proxy sends and receives ~1,000 messages a second here,
so gigabytes would measure the client for hours, not the broker. ferrymq's SDK reads and
writes over the same protocol.
"""

from __future__ import annotations

import itertools
import json
import re
import socket
import time
from collections.abc import Iterator

from ferrymq.client import messages as sdk_messages
from ferrymq.client.errors import FerryError
from ferrymq.client.messages import ReceivedMessage
from ferrymq.codec.errors import CodecError
from ferrymq.codec.remoting import FRAME_LENGTH, RemotingCommand, decode, encode, frame_length
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.codec.remoting_messages import BatchedMessage, encode_batch

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


# ---- a backlog straight to and from the master broker ---------------------------------
PULL_BATCH = 32  # the 4.x client's pullBatchSize
PULL_SYSFLAG_SUBSCRIPTION = 0x4  # the subscription travels with the pull
PULL_SYSFLAG_SUSPEND = 0x2  # long polling


def send_fields(topic: str, queue: int, batch: bool) -> dict[str, str]:
    """A SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE header (the short keys 4.x clients send)."""
    return {
        "a": "bench-producers",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": str(queue),
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": "",
        "j": "0",
        "k": "false",
        "m": "true" if batch else "false",
    }


def pipelined(broker: str, sends: Iterator[tuple[RemotingCommand, int]], in_flight: int) -> float:
    """Seconds to have every (send, messages in it) of ``sends`` acknowledged, ``in_flight``
    outstanding on one connection, as a 4.x client's async sends are; any answer but
    SUCCESS is a ``RemotingError``."""
    host, _, port = broker.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        outstanding: dict[int, int] = {}
        more = True
        started = time.perf_counter()
        while more or outstanding:
            while more and len(outstanding) < in_flight:
                command, messages = next(sends, (None, 0))
                if command is None:
                    more = False
                    break
                sock.sendall(encode(command))
                outstanding[command.opaque] = messages
            if not outstanding:
                break
            answer = read_command(sock)
            outstanding.pop(answer.opaque)
            if answer.code != ResponseCode.SUCCESS:
                raise RemotingError(f"send to {broker}: code {answer.code}: {answer.remark}")
        return time.perf_counter() - started


def send_batches(
    broker: str, topic: str, count: int, body: bytes, batch: int, in_flight: int, queues: int
) -> float:
    """Seconds to send ``count`` messages of ``body`` in ``SEND_BATCH_MESSAGE``s of
    ``batch``, ``in_flight`` batches outstanding on one connection, queues round-robin."""
    encoded = {n: encode_batch([BatchedMessage(0, body, b"")] * n) for n in {batch, count % batch}}

    def sends() -> Iterator[tuple[RemotingCommand, int]]:
        for number, first in enumerate(range(0, count, batch)):
            n = min(batch, count - first)
            fields = send_fields(topic, number % queues, batch=True)
            yield request(RequestCode.SEND_BATCH_MESSAGE, fields, encoded[n]), n

    return pipelined(broker, sends(), in_flight)


def send_spread(broker: str, topics: list[str], body: bytes, in_flight: int) -> float:
    """Seconds to send one SEND_MESSAGE_V2 of ``body`` to queue 0 of each of ``topics``
    in turn, ``in_flight`` outstanding on one connection."""
    sends = (
        (request(RequestCode.SEND_MESSAGE_V2, send_fields(topic, 0, batch=False), body), 1)
        for topic in topics
    )
    return pipelined(broker, sends, in_flight)


def received_messages(body: bytes, broker: str) -> list[ReceivedMessage]:
    """The messages a PULL_MESSAGE answer's body holds, decoded as ferrymq's SDK decodes a
    fetch (the same per-message work on the reading side for both brokers: a 4.x client
    decodes every record too); ``RemotingError`` for bytes that are not whole records."""
    try:
        return sdk_messages.received_messages(body, broker)
    except FerryError as error:
        raise RemotingError(f"pull answer: {error.detail}") from None


def pull_all(broker: str, topic: str, group: str, queues: int, count: int, wait_s: float) -> float:
    """Seconds to read ``count`` messages of ``topic`` from the start of its ``queues``,
    one PULL_MESSAGE of up to ``PULL_BATCH`` in flight per queue on one connection (an
    empty queue is asked again with a long poll); ``RemotingError`` after ``wait_s``."""
    host, _, port = broker.rpartition(":")
    offsets = dict.fromkeys(range(queues), 0)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        outstanding: dict[int, int] = {}

        def pull(queue: int, suspend: bool) -> None:
            fields = {
                "consumerGroup": group,
                "topic": topic,
                "queueId": str(queue),
                "queueOffset": str(offsets[queue]),
                "maxMsgNums": str(PULL_BATCH),
                "sysFlag": str(
                    PULL_SYSFLAG_SUBSCRIPTION | (PULL_SYSFLAG_SUSPEND if suspend else 0)
                ),
                "commitOffset": "0",
                "suspendTimeoutMillis": "1000" if suspend else "0",
                "subscription": "*",
                "subVersion": "0",
                "expressionType": "TAG",
            }
            command = request(RequestCode.PULL_MESSAGE, fields)
            sock.sendall(encode(command))
            outstanding[command.opaque] = queue

        received = 0
        deadline = time.monotonic() + wait_s
        started = time.perf_counter()
        for queue in offsets:
            pull(queue, suspend=False)
        while received < count:
            if time.monotonic() > deadline:
                raise RemotingError(f"read {received} of {count} from {broker}")
            answer = read_command(sock)
            queue = outstanding.pop(answer.opaque)
            if answer.code == ResponseCode.SUCCESS:
                received += len(received_messages(answer.body, broker))
            elif answer.code not in (
                ResponseCode.PULL_NOT_FOUND,
                ResponseCode.PULL_RETRY_IMMEDIATELY,
                ResponseCode.PULL_OFFSET_MOVED,
            ):
                raise RemotingError(f"pull from {broker}: code {answer.code}: {answer.remark}")
            offsets[queue] = int(answer.ext_fields.get("nextBeginOffset", offsets[queue]))
            if received < count:
                pull(queue, suspend=answer.code == ResponseCode.PULL_NOT_FOUND)
        return time.perf_counter() - started
