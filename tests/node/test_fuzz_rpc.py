"""Fuzzing every RPC of a live node: random bytes, generated requests, mutated valid ones.

The RPCs are enumerated from the service descriptors of ``ferrymq.protocol`` (an RPC added
to a ``.proto`` is fuzzed without touching this file, and ``test_every_rpc_was_fuzzed``
fails if the fuzz could not call one). The oracle, per call: it ends within its deadline,
with a gRPC status other than UNKNOWN (what grpc answers for an unhandled exception) or a
response that carries its own status; the node logs no traceback. At the end: the node
still runs; every queue of every topic re-reads from the node with good CRCs and the
messages sent before the fuzz unchanged; after a SIGTERM the store passes its own
consistency checks offline, and a restarted node serves the same records.

The remoting port gets the same oracle (``tests/support/remoting_strategies.py``): every
request code with valid requests changed anywhere, and random or lying frames; each
non-oneway request is answered by opaque, the node logs no traceback and keeps serving,
and what the remoting sends stored passes the same final checks.

``make test`` runs one derandomized round (under a minute); ``FERRYMQ_FUZZ_SECONDS=600``
(``make fuzz``) runs random rounds for that long.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import os
import pkgutil
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import grpc
import pytest
from crc32c import crc32c
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

import ferrymq.protocol
from ferrymq.client.messages import Message as SdkMessage
from ferrymq.client.messages import decode_records
from ferrymq.client.produce_records import encode_record
from ferrymq.codec.headers import PINNED_QUEUE
from ferrymq.codec.remoting import (
    DEFAULT_MAX_HEADER_BYTES,
    FLAG_ONEWAY,
    RemotingCommand,
    decode,
    encode,
)
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as admin
from ferrymq.protocol.ferrymq import data_pb2 as data
from node.config import load_node_config
from store.message_store import MessageStore
from tests.support.nodes import NodeProcess, start_node
from tests.support.proto_strategies import (
    Pools,
    integers_at_bounds,
    message_class,
    messages,
    metadata,
    mutations,
)
from tests.support.remoting_client import RemotingClient
from tests.support.remoting_strategies import RemotingRequest, remoting_requests, request_codes
from tests.support.rpc import message as wire_message
from tests.support.stores import assert_derived_files_agree

pytestmark = pytest.mark.slow

RPC_TIMEOUT_S = 3.0
FUZZ_SECONDS = float(os.environ.get("FERRYMQ_FUZZ_SECONDS", "0"))  # 0: one bounded round
BODY_LIMIT = 65_536  # small, so bodies past the limit are cheap to send
NODE_TOML = f"max_message_body_bytes = {BODY_LIMIT}\n"
# Examples per RPC and input kind in one round (make test runs one; every run the same
# inputs, so more per round only repeats them: ``make fuzz`` looks further).
EXAMPLES = {"raw": 10, "generated": 20, "mutated": 20, "metadata": 5}
# The fuzz creates, changes and deletes these freely; the known topics are kept out of it.
# Those of POOL_TOPIC_TYPES and POOL_GROUP_FIFO are put back before each RPC is fuzzed.
POOL_TOPIC_TYPES = {
    "fz-normal": admin.NORMAL,
    "fz-fifo": admin.FIFO,
    "fz-delay": admin.DELAY,
    "fz-txn": admin.TRANSACTION,
}
POOL_GROUP_FIFO = {"fz-group": False, "fz-fifo-group": True}
POOL_TOPICS = (*POOL_TOPIC_TYPES, "fz-new")
POOL_GROUPS = (*POOL_GROUP_FIFO, "fz-new-group")
KNOWN_TOPIC = "known-normal"
KNOWN_FIFO_TOPIC = "known-fifo"
KNOWN_GROUP = "known-reader"
KNOWN_QUEUES = 4
# What a node writes in its log when a handler or a task failed unhandled.
FAILURE_MARKERS = (
    "Traceback",
    "Exception in callback",
    "exception was never retrieved",
    "Unexpected [",
)
# gRPC codes that mean the node failed rather than refused: an unhandled exception
# (UNKNOWN), no answer within the deadline, a dropped connection.
FAILURE_CODES = {
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.UNIMPLEMENTED,
}


@dataclass(frozen=True)
class Rpc:
    path: str
    request_class: type[Message]
    response_class: type[Message]
    client_streaming: bool
    server_streaming: bool

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[1]


def protocol_rpcs() -> list[Rpc]:
    """Every method of every service in the generated modules of ``ferrymq.protocol``."""
    found = []
    for module_info in pkgutil.walk_packages(ferrymq.protocol.__path__, "ferrymq.protocol."):
        if not module_info.name.endswith("_pb2"):
            continue
        module = importlib.import_module(module_info.name)
        for service in module.DESCRIPTOR.services_by_name.values():
            found.extend(
                Rpc(
                    f"/{service.full_name}/{method.name}",
                    message_class(method.input_type),
                    message_class(method.output_type),
                    method.client_streaming,
                    method.server_streaming,
                )
                for method in service.methods
            )
    return sorted(found, key=lambda r: r.path)


RPCS = protocol_rpcs()
RPCS_BY_NAME = {r.name: r for r in RPCS}
assert len(RPCS_BY_NAME) == len(RPCS), "two services share a method name: key RPCs by path"


# ---- the node under fuzz ------------------------------------------------------------------
@dataclass
class FuzzedNode:
    process: NodeProcess
    log_path: str
    channel: grpc.Channel
    known: dict[tuple[str, int, int], bytes]  # (topic, queue, offset) -> body, sent before
    templates: dict[str, list] = field(default_factory=dict)  # valid requests by RPC name
    log_offset: int = 0
    calls: Counter = field(default_factory=Counter)  # (kind, rpc name) -> calls
    sent_ids: set[str] = field(default_factory=set)  # ids of messages the fuzz got stored
    outcomes: Counter = field(default_factory=Counter)  # (rpc name, status) -> calls
    seconds: Counter = field(default_factory=Counter)  # rpc name -> time spent in calls

    @staticmethod
    def valid_request(template) -> Message | list:
        return template() if callable(template) else template

    def restore_pool(self) -> None:
        """Put back the pool topics and groups as ``populate`` made them: a fuzzed
        DeleteTopic or UpdateTopic must not leave every later request TOPIC_NOT_FOUND."""
        listed = unary(self.channel, RPCS_BY_NAME["ListTopics"], admin.ListTopicsRequest())
        topics = {t.name: t for t in listed.topics}
        for name, kind in POOL_TOPIC_TYPES.items():
            topic = topics.get(name)
            if topic is not None and topic.message_type != kind:
                request = admin.DeleteTopicRequest(name=name)
                unary(self.channel, RPCS_BY_NAME["DeleteTopic"], request)
                topic = None
            if topic is None:
                create_topic(self.channel, name, kind)
            elif topic.permission != admin.READ_WRITE:
                changed = admin.Topic(
                    name=name, queue_count=topic.queue_count, permission=admin.READ_WRITE
                )
                request = admin.UpdateTopicRequest(topic=changed)
                answer = unary(self.channel, RPCS_BY_NAME["UpdateTopic"], request)
                assert answer.status.code == 0, answer.status
        listed = unary(self.channel, RPCS_BY_NAME["ListGroups"], admin.ListGroupsRequest())
        groups = {g.name: g for g in listed.groups}
        for name, fifo in POOL_GROUP_FIFO.items():
            group = groups.get(name)
            if group is not None and group.fifo != fifo:
                request = admin.DeleteGroupRequest(name=name)
                unary(self.channel, RPCS_BY_NAME["DeleteGroup"], request)
                group = None
            if group is None:
                create_group(self.channel, name, fifo)

    def new_log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            f.seek(self.log_offset)
            text = f.read()
            self.log_offset = f.tell()
        return text


def unary(channel: grpc.Channel, rpc_: Rpc, request: Message) -> Message:
    """A plain typed call (setup and checks, not fuzz); sends go to the queues they name
    (``ferrymq.codec.headers``), where the checks look for them."""
    call = channel.unary_unary(
        rpc_.path,
        request_serializer=type(request).SerializeToString,
        response_deserializer=rpc_.response_class.FromString,
    )
    return call(request, timeout=10, metadata=[PINNED_QUEUE])


def send(channel: grpc.Channel, *messages_: pb.Message) -> rpc.SendMessageResponse:
    answer = unary(channel, RPCS_BY_NAME["SendMessage"], rpc.SendMessageRequest(messages=messages_))
    assert answer.status.code == pb.OK, answer.status
    return answer


def create_topic(channel: grpc.Channel, name: str, message_type: int, queues: int = 2) -> None:
    topic = admin.Topic(name=name, queue_count=queues, message_type=message_type)
    answer = unary(channel, RPCS_BY_NAME["CreateTopic"], admin.CreateTopicRequest(topic=topic))
    assert answer.status.code == 0, answer.status


def create_group(channel: grpc.Channel, name: str, fifo: bool = False) -> None:
    group = admin.Group(name=name, fifo=fifo)
    answer = unary(channel, RPCS_BY_NAME["CreateGroup"], admin.CreateGroupRequest(group=group))
    assert answer.status.code == 0, answer.status


def receive_handles(
    channel: grpc.Channel, group: str, topic: str, batch: int = 8
) -> list[pb.Message]:
    request = rpc.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic)),
        batch_size=batch,
    )
    request.invisible_duration.seconds = 600
    request.long_polling_timeout.seconds = 1
    call = channel.unary_stream(
        RPCS_BY_NAME["ReceiveMessage"].path,
        request_serializer=rpc.ReceiveMessageRequest.SerializeToString,
        response_deserializer=rpc.ReceiveMessageResponse.FromString,
    )
    parts = list(call(request, timeout=10))
    return [p.message for p in parts if p.WhichOneof("content") == "message"]


def populate(channel: grpc.Channel) -> dict[tuple[str, int, int], bytes]:
    """The known messages (kept out of the fuzz) and the pool topics the fuzz works on."""
    create_topic(channel, KNOWN_TOPIC, admin.NORMAL, KNOWN_QUEUES)
    create_topic(channel, KNOWN_FIFO_TOPIC, admin.FIFO, 2)
    create_group(channel, KNOWN_GROUP)
    known = {}
    for i in range(40):
        body = f"known-{i}-".encode() * (1 + i)
        queue_id = i % KNOWN_QUEUES
        message = wire_message(KNOWN_TOPIC, body, f"KNOWN{i:04d}", queue_id=queue_id, tag="t")
        known[(KNOWN_TOPIC, queue_id, i // KNOWN_QUEUES)] = body
        send(channel, message)
    fifo_offsets: Counter = Counter()
    for i in range(10):
        body = f"fifo-{i}".encode()
        message = wire_message(
            KNOWN_FIFO_TOPIC, body, f"KNOWNF{i:04d}", message_type=pb.FIFO, message_group="g"
        )
        queue_id = zlib.crc32(b"g") % 2
        known[(KNOWN_FIFO_TOPIC, queue_id, fifo_offsets[queue_id])] = body
        fifo_offsets[queue_id] += 1
        send(channel, message)
    for name, kind in POOL_TOPIC_TYPES.items():
        create_topic(channel, name, kind)
    for name, fifo in POOL_GROUP_FIFO.items():
        create_group(channel, name, fifo)
    return known


def valid_requests(channel: grpc.Channel) -> dict[str, list]:
    """Valid requests per RPC, or functions making them from the node's state of the
    moment (a receipt handle in flight, a pending transaction). The mutation fuzz changes
    one field of one of them."""
    acl_entry = admin.AclEntry(
        effect=admin.ACL_ALLOW, action=admin.ACL_PUBLISH, kind=admin.ACL_TOPIC, pattern="fz-*"
    )
    normal, fifo, delay, txn = POOL_TOPICS[:4]
    group = POOL_GROUPS[0]
    ids = itertools.count()

    def fresh_handle() -> str:
        """The receipt handle of a delivery in flight now: mutations of an ack see a
        current one, not one an earlier example already used."""
        send(channel, wire_message(normal, b"to-pop", f"POP{next(ids):06d}", tag="a"))
        return receive_handles(channel, group, normal, batch=1)[0].system_properties.receipt_handle

    def with_a_message_to_receive(**fields) -> rpc.ReceiveMessageRequest:
        """A receive with a new message waiting (not a long poll that times out)."""
        send(channel, wire_message(normal, b"to-receive", f"RCV{next(ids):06d}", tag="a"))
        return rpc.ReceiveMessageRequest(**fields)

    def fresh_transaction() -> str:
        half = send(
            channel, wire_message(txn, b"half", f"TXN{next(ids):06d}", message_type=pb.TRANSACTION)
        )
        return half.entries[0].transaction_id

    resource = pb.Resource
    queue = pb.MessageQueue(topic=resource(name=normal), id=0)
    later = pb.SystemProperties(message_id="DELAYED1", message_type=pb.DELAY)
    later.delivery_timestamp.seconds = int(time.time()) + 3
    by_name: dict[str, list] = {
        "QueryRoute": [rpc.QueryRouteRequest(topic=resource(name=normal))],
        "Heartbeat": [
            rpc.HeartbeatRequest(group=resource(name=group), client_type=pb.PUSH_CONSUMER)
        ],
        "SendMessage": [
            rpc.SendMessageRequest(messages=[wire_message(normal, b"m", "FZSEND1", tag="x")]),
            rpc.SendMessageRequest(
                messages=[
                    wire_message(fifo, b"f", "FZSEND2", message_type=pb.FIFO, message_group="g")
                ]
            ),
            rpc.SendMessageRequest(
                messages=[
                    pb.Message(topic=resource(name=delay), body=b"d", system_properties=later)
                ]
            ),
            rpc.SendMessageRequest(
                messages=[wire_message(txn, b"t", "FZSEND3", message_type=pb.TRANSACTION)]
            ),
        ],
        "QueryAssignment": [
            rpc.QueryAssignmentRequest(topic=resource(name=normal), group=resource(name=group))
        ],
        "ReceiveMessage": [
            lambda: with_a_message_to_receive(
                group=resource(name=group),
                message_queue=pb.MessageQueue(topic=resource(name=normal)),
                filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                batch_size=4,
                invisible_duration={"seconds": 30},
                long_polling_timeout={"seconds": 1},
            )
        ],
        "AckMessage": [
            lambda: rpc.AckMessageRequest(
                group=resource(name=group),
                topic=resource(name=normal),
                entries=[rpc.AckMessageEntry(message_id="P", receipt_handle=fresh_handle())],
            )
        ],
        "ChangeInvisibleDuration": [
            lambda: rpc.ChangeInvisibleDurationRequest(
                group=resource(name=group),
                topic=resource(name=normal),
                receipt_handle=fresh_handle(),
                invisible_duration={"seconds": 5},
                message_id="P",
            )
        ],
        "ForwardMessageToDeadLetterQueue": [
            lambda: rpc.ForwardMessageToDeadLetterQueueRequest(
                group=resource(name=group),
                topic=resource(name=normal),
                receipt_handle=fresh_handle(),
                message_id="P",
                delivery_attempt=1,
                max_delivery_attempts=16,
            )
        ],
        "PullMessage": [
            rpc.PullMessageRequest(
                group=resource(name=group),
                message_queue=queue,
                offset=0,
                batch_size=8,
                filter_expression=pb.FilterExpression(type=pb.TAG, expression="a||b"),
                long_polling_timeout={"seconds": 1},
            )
        ],
        "UpdateOffset": [
            rpc.UpdateOffsetRequest(group=resource(name=group), message_queue=queue, offset=1)
        ],
        "GetOffset": [rpc.GetOffsetRequest(group=resource(name=group), message_queue=queue)],
        "QueryOffset": [
            rpc.QueryOffsetRequest(
                message_queue=queue, query_offset_policy=pb.TIMESTAMP, timestamp={"seconds": 1}
            )
        ],
        "EndTransaction": [
            lambda: rpc.EndTransactionRequest(
                topic=resource(name=txn),
                message_id="T",
                transaction_id=fresh_transaction(),
                resolution=pb.COMMIT,
                source=pb.SOURCE_CLIENT,
            )
        ],
        "SyncLiteSubscription": [
            rpc.SyncLiteSubscriptionRequest(
                action=pb.PARTIAL_ADD,
                topic=resource(name=normal),
                group=resource(name="fz-lite-group"),
                lite_topic_set=["fz-lite"],
                offset_option=pb.OffsetOption(tail_n=3),
            )
        ],
        "RecallMessage": [
            rpc.RecallMessageRequest(
                topic=resource(name=normal),
                recall_handle="djEgZnogZ3JvdXAtMSAxIGlkIDAwMDA=",  # "v1 fz group-1 1 id 0000"
            )
        ],
        "Telemetry": [
            [
                rpc.TelemetryCommand(
                    settings=pb.Settings(
                        client_type=pb.PRODUCER,
                        publishing=pb.Publishing(topics=[resource(name=txn)]),
                    )
                ),
                rpc.TelemetryCommand(
                    settings=pb.Settings(
                        client_type=pb.SIMPLE_CONSUMER,
                        subscription=pb.Subscription(group=resource(name=group)),
                    )
                ),
            ]
        ],
        "NotifyClientTermination": [rpc.NotifyClientTerminationRequest(group=resource(name=group))],
        "Fetch": [data.FetchRequest(group=group, topic=normal, queue_id=0, max_messages=4)],
        "Produce": [
            data.ProduceRequest(
                topic=normal,
                queue_id=1,
                count=2,
                records=b"".join(
                    encode_record(SdkMessage(normal, b"p%d" % i, tag="p", keys=["k"]), pb.NORMAL, 1)
                    for i in range(2)
                ),
            )
        ],
        "CreateTopic": [admin.CreateTopicRequest(topic=admin.Topic(name="fz-new", queue_count=2))],
        "UpdateTopic": [
            admin.UpdateTopicRequest(
                topic=admin.Topic(name=normal, queue_count=3, permission=admin.READ_WRITE)
            )
        ],
        "DeleteTopic": [admin.DeleteTopicRequest(name="fz-new")],
        "ListTopics": [admin.ListTopicsRequest()],
        "DescribeTopic": [admin.DescribeTopicRequest(name=normal)],
        "CreateGroup": [
            admin.CreateGroupRequest(
                group=admin.Group(name="fz-new-group", max_delivery_attempts=3)
            )
        ],
        "UpdateGroup": [
            admin.UpdateGroupRequest(name="fz-new-group", max_delivery_attempts=5, fifo=True),
            admin.UpdateGroupRequest(name=group, lite_exclusive=False),
        ],
        "DeleteGroup": [admin.DeleteGroupRequest(name="fz-new-group")],
        "ListGroups": [admin.ListGroupsRequest()],
        "GroupProgress": [admin.GroupProgressRequest(group=group, topic=normal)],
        "GroupMembers": [admin.GroupMembersRequest(group=group)],
        "QueryMessageById": [admin.QueryMessageByIdRequest(topic=normal, message_id="POP0003")],
        "QueryMessageByKey": [
            admin.QueryMessageByKeyRequest(topic=normal, key="POP0004", max_count=4)
        ],
        "QueryMessageByOffset": [
            admin.QueryMessageByOffsetRequest(topic=normal, queue_id=0, offset=0)
        ],
        "QueryOffsetByTime": [
            admin.QueryOffsetByTimeRequest(topic=normal, queue_id=0, timestamp_ms=1)
        ],
        "MessageHistory": [admin.MessageHistoryRequest(topic=normal, queue_id=0, offset=0)],
        "ClusterStatus": [admin.ClusterStatusRequest()],
        "Failover": [admin.FailoverRequest(broker_group="group-1", target_node="node-2")],
        "FinalizeUpgrade": [admin.FinalizeUpgradeRequest(routing_format=2)],
        "NodeConfig": [admin.NodeConfigRequest(), admin.NodeConfigRequest(node_id="fz-nobody")],
        "ResetOffsets": [
            admin.ResetOffsetsRequest(group=group, topic=normal, target=admin.RESET_TO_EARLIEST)
        ],
        "ResendDeadLetters": [
            admin.ResendDeadLettersRequest(
                group=group, offsets=[0, 1], from_offset=-1, to_offset=-1
            ),
            admin.ResendDeadLettersRequest(group=group, from_offset=0, to_offset=3),
        ],
        "ConsumeMessageDirectly": [
            admin.ConsumeMessageDirectlyRequest(
                group=group, topic=normal, physical_offset=0, timeout_ms=500
            ),
            admin.ConsumeMessageDirectlyRequest(
                group=group, topic=normal, message_id="00" * 16, client_id="c-1"
            ),
        ],
        "ListProducers": [admin.ListProducersRequest()],
        "TopicConsumers": [admin.TopicConsumersRequest(topic=normal)],
        "ListDeadLetters": [admin.ListDeadLettersRequest(group=group, from_offset=-1, limit=10)],
        "CreateUser": [admin.CreateUserRequest(access_key="fz-user", secret_key="fz-secret")],
        "UpdateUser": [admin.UpdateUserRequest(access_key="fz-user", admin=True)],
        "DeleteUser": [admin.DeleteUserRequest(access_key="fz-user")],
        "ListUsers": [admin.ListUsersRequest()],
        "GrantAcl": [admin.GrantAclRequest(access_key="fz-user", entry=acl_entry)],
        "RevokeAcl": [admin.RevokeAclRequest(access_key="fz-user", entry=acl_entry)],
    }
    missing = {r.name for r in RPCS} - set(by_name)
    assert not missing, f"no valid request to mutate for {sorted(missing)}: add one here"
    return by_name


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory) -> Iterator[FuzzedNode]:
    directory = tmp_path_factory.mktemp("fuzz")
    log_path = str(directory / "node.log")
    process = start_node(str(directory / "node"), NODE_TOML, log_path=log_path)
    channel = grpc.insecure_channel(
        process.address, options=[("grpc.max_send_message_length", 8 << 20)]
    )
    try:
        node = FuzzedNode(process, log_path, channel, populate(channel))
        node.templates = valid_requests(channel)
        yield node
    finally:
        channel.close()
        if process.process.poll() is None:
            process.sigkill()


# ---- one call and its oracle -------------------------------------------------------------
def answered(response: Message) -> bool:
    """Whether a response carries a status: RocketMQ's (code 0 is unset, which the
    official clients reject), the Admin service's (always with a message), or the Data
    service's own ``code``."""
    fields = response.DESCRIPTOR.fields_by_name
    if "status" in fields:
        if not response.HasField("status"):
            return False
        if response.status.DESCRIPTOR.full_name == "apache.rocketmq.v2.Status":
            return response.status.code != pb.CODE_UNSPECIFIED
        return bool(response.status.message)
    if "code" in fields:
        return response.code != 0
    raise AssertionError(f"{response.DESCRIPTOR.full_name}: no status field the fuzz knows")


def outcome_of(responses: list[Message]) -> str:
    """The first status in the responses, for the summary of what the fuzz reached."""
    for response in responses:
        fields = response.DESCRIPTOR.fields_by_name
        if "status" in fields and response.HasField("status"):
            if response.status.DESCRIPTOR.full_name != "apache.rocketmq.v2.Status":
                return f"admin {response.status.code}"
            code = response.status.code
        elif "code" in fields and "status" not in fields:
            code = response.code
        else:
            continue
        return pb.Code.Name(code) if code in CODE_NUMBERS else str(code)
    return "no status"


CODE_NUMBERS = frozenset(pb.Code.values())


def fuzz_call(
    node: FuzzedNode,
    kind: str,
    target: Rpc,
    request: bytes | Message | list,
    headers: tuple[tuple[str, str], ...] = (),
) -> None:
    """One call and every per-call check of the oracle."""
    node.calls[kind, target.name] += 1
    if isinstance(request, list):
        payloads = [r if isinstance(r, bytes) else r.SerializeToString() for r in request]
    else:
        payloads = [request if isinstance(request, bytes) else request.SerializeToString()]
    channel = node.channel
    started = time.monotonic()
    responses: list[bytes] = []
    try:
        if target.client_streaming and target.server_streaming:
            call = channel.stream_stream(target.path)
            responses = list(call(iter(payloads), timeout=RPC_TIMEOUT_S, metadata=headers))
        elif target.client_streaming:
            call = channel.stream_unary(target.path)
            responses = [call(iter(payloads), timeout=RPC_TIMEOUT_S, metadata=headers)]
        elif target.server_streaming:
            call = channel.unary_stream(target.path)
            responses = list(call(payloads[0], timeout=RPC_TIMEOUT_S, metadata=headers))
        else:
            call = channel.unary_unary(target.path)
            responses = [call(payloads[0], timeout=RPC_TIMEOUT_S, metadata=headers)]
        error = None
    except grpc.RpcError as failed:
        error = failed
    took = time.monotonic() - started
    node.seconds[target.name] += took
    log = node.new_log()
    where = f"{kind} {target.name} took {took:.2f}s"
    assert not any(marker in log for marker in FAILURE_MARKERS), f"{where}; node log:\n{log}"
    assert node.process.process.poll() is None, f"{where}: the node exited"
    if error is not None:
        assert error.code() not in FAILURE_CODES, f"{where}: {error.code()} {error.details()}"
        node.outcomes[target.name, error.code().name] += 1
        return
    decoded = [target.response_class.FromString(r) for r in responses]
    node.outcomes[target.name, outcome_of(decoded)] += 1
    if not target.client_streaming:  # a bidi stream answers only what asks for answers
        assert any(answered(r) for r in decoded), f"{where}: no status in {decoded}"
    remember_stored(node, target, request, decoded)


def remember_stored(node: FuzzedNode, target: Rpc, request, decoded: list[Message]) -> None:
    """Ids of the messages a fuzzed send got stored: the final checks look for them."""
    if target.name == "SendMessage" and isinstance(request, rpc.SendMessageRequest):
        for entry in decoded[0].entries:
            if entry.status.code == pb.OK and request.messages[0].topic.name in POOL_TOPICS[:2]:
                node.sent_ids.add(entry.message_id)


# ---- the fuzz rounds -----------------------------------------------------------------------
def one_rpc(
    body: Callable[[Rpc, st.DataObject], None], target: Rpc
) -> Callable[[st.DataObject], None]:
    def fuzz_one(data: st.DataObject) -> None:
        body(target, data)

    return fuzz_one


def run_rounds(
    kind: str, body: Callable[[Rpc, st.DataObject], None], before_each: Callable[[], None]
) -> None:
    """Fuzz every RPC in turn with ``EXAMPLES[kind]`` examples (so each gets the same
    effort, whatever the number of RPCs). make test: one derandomized round; with
    FERRYMQ_FUZZ_SECONDS, random rounds until this kind's share of the time is used."""
    health = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
    common = dict(
        max_examples=EXAMPLES[kind],
        deadline=timedelta(seconds=RPC_TIMEOUT_S * 3),
        database=None,
        suppress_health_check=health,
        derandomize=not FUZZ_SECONDS,
    )
    ends = time.monotonic() + FUZZ_SECONDS / len(EXAMPLES)
    while True:
        for target in RPCS:
            before_each()
            fuzz_one = one_rpc(body, target)
            fuzz_one.__name__ = f"fuzz_{kind}_{target.name}"  # names it in a failure report
            settings(**common)(given(st.data())(fuzz_one))()
        if time.monotonic() >= ends:
            return


def pools() -> Pools:
    names = (
        *POOL_TOPICS,
        *POOL_GROUPS,
        "group-1",
        "node-1",
        "*",
        "%DLQ%fz-group",
        "%SYS%TRANS_HALF",
    )
    return Pools(names=names, body_limit=BODY_LIMIT)


def test_random_bytes_to_every_rpc(fuzzed: FuzzedNode):
    """Malformed protobuf: random bytes as the request body (or stream of bodies)."""

    def body(target: Rpc, data: st.DataObject) -> None:
        chunk = st.binary(min_size=1, max_size=200)
        if target.client_streaming:
            request = data.draw(st.lists(chunk, min_size=1, max_size=3), label="bodies")
        else:
            request = data.draw(chunk, label="body")
        fuzz_call(fuzzed, "raw", target, request)

    run_rounds("raw", body, fuzzed.restore_pool)


def test_generated_requests_to_every_rpc(fuzzed: FuzzedNode):
    """Structurally valid requests with random field values, drawn from the descriptors."""
    names = pools()
    strategies = {r.path: messages(r.request_class.DESCRIPTOR, names) for r in RPCS}

    def body(target: Rpc, data: st.DataObject) -> None:
        requests = strategies[target.path]
        if target.client_streaming:
            request = data.draw(st.lists(requests, max_size=3), label="requests")
        else:
            request = data.draw(requests, label="request")
        fuzz_call(fuzzed, "generated", target, request)

    run_rounds("generated", body, fuzzed.restore_pool)


def test_mutated_valid_requests(fuzzed: FuzzedNode):
    """A real valid request (real receipt handles, a real transaction) with one field
    changed anywhere in it."""
    names = pools()

    def body(target: Rpc, data: st.DataObject) -> None:
        valid = fuzzed.valid_request(data.draw(st.sampled_from(fuzzed.templates[target.name])))
        if isinstance(valid, list):  # a stream: mutate one command of it
            index = data.draw(st.integers(0, len(valid) - 1), label="command")
            request = list(valid)
            request[index] = data.draw(mutations(valid[index], names), label="mutated")
        else:
            request = data.draw(mutations(valid, names), label="mutated")
        fuzz_call(fuzzed, "mutated", target, request)

    run_rounds("mutated", body, fuzzed.restore_pool)


def test_malformed_metadata_on_valid_requests(fuzzed: FuzzedNode):
    """Garbage in the headers the RocketMQ clients send (authorization, x-mq-date-time,
    client ids), unknown headers and oversized ones, on otherwise valid requests."""
    names = pools()

    def body(target: Rpc, data: st.DataObject) -> None:
        valid = fuzzed.valid_request(data.draw(st.sampled_from(fuzzed.templates[target.name])))
        headers = data.draw(metadata(names), label="metadata")
        fuzz_call(fuzzed, "metadata", target, valid, headers)

    run_rounds("metadata", body, fuzzed.restore_pool)


def test_every_rpc_was_fuzzed(fuzzed: FuzzedNode):
    """Each input kind reached every RPC the descriptors name (a new RPC the fuzz could
    not call fails here)."""
    for name in sorted({name for name, _ in fuzzed.outcomes}):
        seen = {o: n for (r, o), n in fuzzed.outcomes.items() if r == name}
        spent = f"{fuzzed.seconds[name]:.1f}s"
        print(name, spent, dict(sorted(seen.items(), key=lambda item: -item[1])))
    for kind in EXAMPLES:
        missed = [r.name for r in RPCS if not fuzzed.calls[kind, r.name]]
        assert not missed, f"{kind}: never called {missed}"


# ---- the remoting port ---------------------------------------------------------------------
# Examples per request code (generated) and of random frames, in one round.
REMOTING_EXAMPLES = {"generated": 15, "frames": 40}
FRAME_READ_S = 0.2


def remoting_probe(node: FuzzedNode) -> None:
    """The node still answers a plain request on a connection of its own."""
    with RemotingClient(node.process.remoting, timeout_s=RPC_TIMEOUT_S) as probe:
        answer = probe.call(RequestCode.GET_MAX_OFFSET, {"topic": KNOWN_TOPIC, "queueId": "0"})
        assert answer.code == ResponseCode.SUCCESS, answer


def remoting_call(node: FuzzedNode, client: RemotingClient, request: RemotingRequest) -> bool:
    """One request and the oracle: a request that is not oneway is answered by opaque
    within the deadline with a response code; a header over the node's limit closes the
    connection (False: open another); the node logs no traceback and keeps running."""
    opaque = next(client.opaques)
    command = RemotingCommand(
        request.code,
        opaque,
        request.flag,
        None,
        request.fields,
        request.body,
        "JAVA",
        407,
        request.serialize_type,
    )
    try:
        frame = encode(command)
    except ValueError:  # a code or field the binary header cannot carry: JSON only
        reject()
    header_bytes = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
    node.calls["remoting", str(request.code)] += 1
    started = time.monotonic()
    client.send_raw(frame)
    where = f"remoting code {request.code} {request.fields!r:.300} body {request.body[:60]!r}"
    if header_bytes > DEFAULT_MAX_HEADER_BYTES:
        assert client.closed_by_peer(), f"{where}: a header over the limit was not refused"
        open_ = False
    elif request.flag & FLAG_ONEWAY:
        answer = client.call(RequestCode.GET_MAX_OFFSET, {"topic": KNOWN_TOPIC, "queueId": "0"})
        assert answer.code == ResponseCode.SUCCESS, f"{where}: then {answer}"
        open_ = True
    else:
        answer = client.response()  # a heartbeat may also bring the node's own notices
        assert answer.opaque == opaque, f"{where}: {answer}"
        node.outcomes[f"remoting {request.code}", ResponseCode(answer.code).name] += 1
        open_ = True
    node.seconds[f"remoting {request.code}"] += time.monotonic() - started
    log = node.new_log()
    assert not any(marker in log for marker in FAILURE_MARKERS), f"{where}; node log:\n{log}"
    assert node.process.process.poll() is None, f"{where}: the node exited"
    return open_


def remoting_round(fuzzed: FuzzedNode, code: int, names: Pools, client, connection: list):
    def fuzz_one(data: st.DataObject) -> None:
        request = data.draw(remoting_requests(code, names, "fz-normal", "fz-group"))
        if not remoting_call(fuzzed, client(), request):
            connection.pop().close()

    fuzz_one.__name__ = f"fuzz_remoting_{code}"  # names it in a failure report
    return fuzz_one


def test_generated_requests_to_every_remoting_code(fuzzed: FuzzedNode):
    """Each request code (and some the node does not serve) with a valid request changed
    anywhere: missing and non-numeric fields, huge and odd values, wrong bodies, batches
    that are not whole messages, both header forms, oneway or not."""
    names = pools()
    common = dict(
        max_examples=REMOTING_EXAMPLES["generated"],
        deadline=timedelta(seconds=RPC_TIMEOUT_S * 3),
        database=None,
        # Codes over 16 bits cannot travel in the binary header: those draws are rejected.
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
        derandomize=not FUZZ_SECONDS,
    )
    connection: list[RemotingClient] = []

    def client() -> RemotingClient:
        if not connection:
            connection.append(RemotingClient(fuzzed.process.remoting, timeout_s=RPC_TIMEOUT_S))
        return connection[0]

    try:
        for code in request_codes():
            fuzzed.restore_pool()
            fuzz_one = remoting_round(fuzzed, code, names, client, connection)
            settings(**common)(given(st.data())(fuzz_one))()
    finally:
        for open_client in connection:
            open_client.close()
    for code in request_codes():
        assert fuzzed.calls["remoting", str(code)], f"remoting code {code} was never fuzzed"
    remoting_probe(fuzzed)


def frames() -> st.SearchStrategy[bytes]:
    """Random bytes, and frames whose length, serialize type or header length lie."""
    lying = st.builds(
        lambda length, form, header_length, rest: (
            length.to_bytes(4, "big", signed=True)
            + bytes([form])
            + header_length.to_bytes(3, "big")
            + rest
        ),
        integers_at_bounds(-(2**31), 2**31 - 1),
        st.integers(0, 255),
        st.integers(0, 2**24 - 1),
        st.binary(max_size=120),
    )
    json_header = st.builds(
        lambda header, body: (
            (4 + len(header) + len(body)).to_bytes(4, "big")
            + len(header).to_bytes(4, "big")
            + header
            + body
        ),
        st.sampled_from(
            [
                b'{"code":34,"opaque":7}',
                b'{"code":"x","opaque":7}',
                b'{"opaque":7}',
                b'{"code":10,"opaque":7,"extFields":[]}',
                b'{"code":10,"opaque":7,"extFields":{"topic":1}}',
                b'{"code":11,"opaque":"seven"}',
                b"{}",
                b"[]",
            ]
        ),
        st.binary(max_size=40),
    )
    return st.one_of(st.binary(min_size=1, max_size=300), lying, json_header)


def test_random_frames_to_the_remoting_port(fuzzed: FuzzedNode):
    """Bytes that are not frames, or frames that lie about their lengths and forms, each
    on a connection of its own: what comes back is responses only, or the connection
    closes; the node keeps serving every other connection."""

    def fuzz_one(data: st.DataObject) -> None:
        raw = data.draw(frames(), label="bytes")
        fuzzed.calls["remoting", "frames"] += 1
        with RemotingClient(fuzzed.process.remoting, timeout_s=RPC_TIMEOUT_S) as client:
            client.send_raw(raw)
            client.socket.settimeout(FRAME_READ_S)
            client.closed_by_peer()  # reads until closed or quiet; frames must be whole
            for frame in client.frames:
                assert decode(frame).is_response, (raw[:80], frame[:80])
        log = fuzzed.new_log()
        assert not any(marker in log for marker in FAILURE_MARKERS), f"{raw[:80]!r}:\n{log}"
        remoting_probe(fuzzed)

    settings(
        max_examples=REMOTING_EXAMPLES["frames"],
        deadline=timedelta(seconds=RPC_TIMEOUT_S * 3),
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
        derandomize=not FUZZ_SECONDS,
    )(given(st.data())(fuzz_one))()


# ---- the stored data stays valid -----------------------------------------------------------
Contents = dict[tuple[str, int, int], tuple[str, bytes]]


def pull_queue(channel: grpc.Channel, topic: str, queue_id: int) -> Contents:
    """Every message of one queue through PullMessage, the official clients' path: each
    record must also convert to the wire message (one that does not fails every pull of
    its queue), with a body matching its MD5 digest."""
    call = channel.unary_stream(
        RPCS_BY_NAME["PullMessage"].path,
        request_serializer=rpc.PullMessageRequest.SerializeToString,
        response_deserializer=rpc.PullMessageResponse.FromString,
    )
    contents: Contents = {}
    offset = 0
    while True:
        request = rpc.PullMessageRequest(
            group=pb.Resource(name=KNOWN_GROUP),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=queue_id),
            offset=offset,
            batch_size=256,
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        )
        parts = list(call(request, timeout=10))
        status = next(p.status for p in parts if p.WhichOneof("content") == "status")
        next_offset = next(p.next_offset for p in parts if p.WhichOneof("content") == "next_offset")
        if status.code == pb.ILLEGAL_OFFSET and next_offset > offset:
            offset = next_offset  # retention passed the start
            continue
        assert status.code in (pb.OK, pb.MESSAGE_NOT_FOUND), (topic, queue_id, status)
        for part in parts:
            if part.WhichOneof("content") != "message":
                continue
            message, system = part.message, part.message.system_properties
            expected = hashlib.md5(message.body).hexdigest().upper()
            assert system.body_digest.checksum == expected, topic
            contents[topic, queue_id, system.queue_offset] = (system.message_id, message.body)
        if status.code != pb.OK or next_offset <= offset:
            return contents
        offset = next_offset


def read_through_node(channel: grpc.Channel) -> Contents:
    """Every record of every queue of every topic, from offset 0, through Data.Fetch, and
    the same through PullMessage."""
    fetch_rpc = RPCS_BY_NAME["Fetch"]
    topics = unary(channel, RPCS_BY_NAME["ListTopics"], admin.ListTopicsRequest()).topics
    contents: Contents = {}
    for topic in topics:
        for queue_id in range(topic.queue_count):
            offset = 0
            while True:
                request = data.FetchRequest(
                    group=KNOWN_GROUP, topic=topic.name, queue_id=queue_id, offset=offset
                )
                answer = unary(channel, fetch_rpc, request)
                if answer.code == pb.ILLEGAL_OFFSET and offset < answer.min_offset:
                    offset = answer.min_offset
                    continue
                assert answer.code in (pb.OK, pb.MESSAGE_NOT_FOUND), (topic.name, answer.message)
                for record in decode_records(answer.records):
                    assert crc32c(record.body) == record.body_crc, (topic.name, record.queue_offset)
                    key = (record.topic, record.queue_id, record.queue_offset)
                    contents[key] = (record.unique_key or "", record.body)
                if answer.code != pb.OK or answer.next_offset >= answer.max_offset:
                    break
                offset = answer.next_offset
            pulled = pull_queue(channel, topic.name, queue_id)
            fetched = {k: v for k, v in contents.items() if k[:2] == (topic.name, queue_id)}
            assert {k: v[1] for k, v in pulled.items()} == {k: v[1] for k, v in fetched.items()}
    return contents


def read_offline(data_dir: str) -> Contents:
    """Every record of the stopped node's store, after the store's own consistency checks."""
    config = load_node_config(os.path.join(data_dir, "node.toml"), data_dir=data_dir)
    store = MessageStore.open(config.store_config())
    try:
        assert_derived_files_agree(store, distinct_unique_keys=False)
        commitlog = store.commitlog
        contents: Contents = {}
        for stored in commitlog.iterate(commitlog.min_offset, commitlog.write_offset):
            assert crc32c(stored.body) == stored.body_crc, stored.physical_offset
            key = (stored.topic, stored.queue_id, stored.queue_offset)
            contents[key] = (stored.unique_key or "", stored.body)
        return contents
    finally:
        store.shutdown()


def assert_known_messages(contents: Contents, known: dict[tuple[str, int, int], bytes]) -> None:
    for key, body in known.items():
        assert key in contents, f"known message {key} is gone"
        assert contents[key][1] == body, f"known message {key} changed"


def test_node_survives_and_data_stays_valid(fuzzed: FuzzedNode, tmp_path_factory):
    """After the fuzz: the node runs, re-reads every queue with good CRCs and the known
    messages unchanged; stopped, its store passes the consistency checks; restarted on
    the same directory, it serves the same records."""
    process = fuzzed.process
    assert process.process.poll() is None, "the node exited during the fuzz"
    served = read_through_node(fuzzed.channel)
    assert_known_messages(served, fuzzed.known)
    assert process.sigterm() == 0
    log = fuzzed.new_log()
    assert not any(marker in log for marker in FAILURE_MARKERS), log
    stored = read_offline(process.data_dir)
    assert_known_messages(stored, fuzzed.known)
    for key, record in served.items():
        assert stored.get(key) == record, f"{key} differs between the node and the store"
    stored_ids = {unique_key for unique_key, _ in stored.values()}
    assert fuzzed.sent_ids <= stored_ids, sorted(fuzzed.sent_ids - stored_ids)[:5]
    restarted = start_node(process.data_dir, NODE_TOML, log_path=fuzzed.log_path)
    fuzzed.process = restarted
    channel = grpc.insecure_channel(restarted.address)
    try:
        again = read_through_node(channel)
    finally:
        channel.close()
    assert_known_messages(again, fuzzed.known)
    for key, record in again.items():
        # A restarted node appends (due timers, transaction checks), never rewrites.
        assert stored.get(key, record) == record, f"{key} changed across the restart"
    assert restarted.sigterm() == 0
    log = fuzzed.new_log()
    assert not any(marker in log for marker in FAILURE_MARKERS), log
