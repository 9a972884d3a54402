"""A blocking RocketMQ remoting client for tests: one socket, one request at a time (or
several sent before their answers are read), frames from ``ferrymq.codec.remoting``."""

from __future__ import annotations

import itertools
import json
import socket
import ssl
import time

from ferrymq.client import ClientSecurity
from ferrymq.codec.acl_signature import sign_request
from ferrymq.codec.commitlog_record import decode as decode_record
from ferrymq.codec.remoting import (
    FLAG_RESPONSE,
    SERIALIZE_JSON,
    FrameSplitter,
    RemotingCommand,
    decode,
    encode,
)
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode

# node.toml for tests of 4.x retries and delays: level 2 = 2 s, every other level 1 s, so a
# retry (level 3 + the times consumed again) comes back in a second.
SHORT_DELAY_LEVEL_LIST = "1s 2s " + " ".join(["1s"] * 16)
SHORT_DELAY_LEVELS = f'[messages]\ndelay_levels = "{SHORT_DELAY_LEVEL_LIST}"\n'


class RemotingClient:
    def __init__(
        self,
        address: str,
        timeout_s: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        security: ClientSecurity | None = None,
        source: str | None = None,
    ) -> None:
        """With ``security``, every request is signed as a 4.x client's AclClientRPCHook
        signs it (RocketMQ ACL 1.0). ``source``: the local address to connect from (e.g.
        127.0.0.2: another client address on this machine)."""
        self.security = security
        host, _, port = address.rpartition(":")
        self.socket = socket.create_connection(
            (host, int(port)), timeout=timeout_s, source_address=(source, 0) if source else None
        )
        self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:
            self.socket = ssl_context.wrap_socket(self.socket, server_hostname=host)
        self.splitter = FrameSplitter()
        self.frames: list[bytes] = []
        self.opaques = itertools.count(1)
        self.requests: list[RemotingCommand] = []  # the node's own, received meanwhile

    def close(self) -> None:
        self.socket.close()

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.socket.sendall(data)

    def send(
        self,
        code: int,
        fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        flag: int = 0,
        serialize_type: int = SERIALIZE_JSON,
        opaque: int | None = None,
    ) -> int:
        opaque = next(self.opaques) if opaque is None else opaque
        if self.security is not None:
            fields = sign_request(
                dict(fields or {}), body, self.security.access_key, self.security.secret_key
            )
        command = RemotingCommand(
            code, opaque, flag, None, dict(fields or {}), body, "JAVA", 407, serialize_type
        )
        self.socket.sendall(encode(command))
        return opaque

    def receive(self) -> RemotingCommand:
        while not self.frames:
            data = self.socket.recv(1 << 20)
            if not data:
                raise ConnectionError("the node closed the connection")
            self.frames.extend(self.splitter.feed(data))
        return decode(self.frames.pop(0))

    def call(self, code: int, fields: dict[str, str] | None = None, body: bytes = b"", **kw):
        """Send a request and return its answer; the node's own requests that arrive
        before it (consumer-ids notices) are kept in ``requests``."""
        opaque = self.send(code, fields, body, **kw)
        answer = self.response()
        assert answer.opaque == opaque, answer
        return answer

    def response(self) -> RemotingCommand:
        """The next response; the node's own requests read before it (consumer-ids
        notices, transaction checks) are kept in ``requests``."""
        answer = self.receive()
        while not answer.is_response:
            self.requests.append(answer)
            answer = self.receive()
        return answer

    def node_request(self) -> RemotingCommand:
        """The next request of the node's own (kept by ``call``, or read now)."""
        if self.requests:
            return self.requests.pop(0)
        found = self.receive()
        assert not found.is_response, found
        return found

    def closed_by_peer(self) -> bool:
        """Whether the node closed this connection (reads until EOF or a reset)."""
        try:
            while True:
                data = self.socket.recv(1 << 16)
                if not data:
                    return True
                self.frames.extend(self.splitter.feed(data))
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


def answer_direct_consumption(client: RemotingClient, result: dict) -> RemotingCommand:
    """Answer the node's next CONSUME_MESSAGE_DIRECTLY as a 4.x client does (the node's
    other requests before it skipped), ``result`` its ConsumeMessageDirectlyResult; the
    node's request."""
    asked = client.node_request()
    while asked.code != RequestCode.CONSUME_MESSAGE_DIRECTLY:
        asked = client.node_request()
    body = json.dumps(result).encode()
    client.send(ResponseCode.SUCCESS, body=body, flag=FLAG_RESPONSE, opaque=asked.opaque)
    return asked


def json_of(answer: RemotingCommand):
    return json.loads(answer.body)


def properties_text(properties: dict[str, str]) -> str:
    """As the Java client writes them: pairs joined by 0x02, no trailing separator."""
    return "\x02".join(f"{name}\x01{value}" for name, value in properties.items())


def send_v2_fields(topic: str, queue_id: int = 0, **properties: str) -> dict[str, str]:
    """A SEND_MESSAGE_V2 header as the 4.x client sends it."""
    return {
        "a": "producers",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": str(queue_id),
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": properties_text(properties),
        "j": "0",
        "k": "false",
        "m": "false",
    }


def send_v2(client, topic: str, body: bytes, queue_id: int = 0, **properties: str):
    return client.call(
        RequestCode.SEND_MESSAGE_V2, send_v2_fields(topic, queue_id, **properties), body
    )


def pull_fields(group: str, topic: str, queue_id: int = 0, offset: int = 0) -> dict[str, str]:
    """A PULL_MESSAGE header as the 4.x client sends it (32 at most, no wait, the ``*``
    subscription travelling with the pull); a test changes what it needs."""
    return {
        "consumerGroup": group,
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": "4",  # the subscription travels with the pull
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subscription": "*",
        "subVersion": "0",
        "expressionType": "TAG",
    }


def heartbeat_body(
    client_id: str, groups, topic: str, expression: str = "*", producer: bool = True
) -> bytes:
    """A HEART_BEAT body: a CLUSTERING pull consumer of ``topic`` in each of ``groups``
    (and the client's inner producer group)."""
    body = {
        "clientID": client_id,
        "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}] if producer else [],
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                "unitMode": False,
                "subscriptionDataSet": [
                    {
                        "topic": topic,
                        "subString": expression,
                        "tagsSet": [],
                        "codeSet": [],
                        "subVersion": 1,
                        "expressionType": "TAG",
                        "classFilterMode": False,
                    }
                ],
            }
            for group in groups
        ],
    }
    return json.dumps(body).encode()


def queue_records(address: str, topic: str, group: str, queue_id: int = 0) -> list:
    """Every record of ``topic`` queue ``queue_id`` (the first 32), pulled over the
    remoting port for ``group``: how a test reads a retry or dead-letter topic."""
    with RemotingClient(address) as client:
        answer = client.call(RequestCode.PULL_MESSAGE, pull_fields(group, topic, queue_id))
    found, position = [], 0
    if answer.code != 0:
        return found
    while position < len(answer.body):
        record = decode_record(answer.body, position)
        found.append(record)
        position += record.size
    return found


def cluster_with_resources(directory: str, prefix: str, topics, groups):
    """A 3-node cluster (``tests.support.cluster.ClientCluster``: the 4.x client is given
    every node as a NameServer, ``namesrv``) with the short delay levels, and
    ``<prefix>-<name>`` untyped topics (4 queues) and groups created first, as the remoting
    client tests need them."""
    from ferrymq.protocol.ferrymq import admin_pb2 as api
    from tests.support.cluster import client_cluster, topic_everywhere
    from tests.support.rpc import create_group, create_topic, stubs

    cluster = client_cluster(directory, {"messages": {"delay_levels": SHORT_DELAY_LEVEL_LIST}})
    channel, _, admin = stubs(cluster.address)
    try:
        for name in topics:
            create_topic(
                admin, f"{prefix}-{name}", queues=4, message_type=api.MESSAGE_TYPE_UNSPECIFIED
            )
        for name in groups:
            create_group(admin, f"{prefix}-{name}")
    finally:
        channel.close()
    for name in topics:
        topic_everywhere(cluster.plan, f"{prefix}-{name}")
    return cluster
