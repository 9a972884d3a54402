"""The generated protocol modules carry the official RocketMQ 5 wire format, field by field.

`tests/protocol/test_protocol.py` runs `proto/generate.py --check` (the modules are current) and
spot-checks a few numbers. This file pins *every* served field, enum value, oneof and method
to a table taken from the official apache/rocketmq-apis protos (commit 3e60073, with protoc
descriptors, not by hand), so an edit of `proto/apache/rocketmq/v2/*.proto` that changes the
wire format fails here, and it pins the generator versions to the ones pyproject.toml declares.

Table format: `"<number> [repeated|optional] <type> <name>"`; `optional` is proto3 explicit
presence, types outside apache.rocketmq.v2 are fully qualified.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import re
import tomllib

from google.protobuf import descriptor_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from ferrymq.protocol.apache.rocketmq.v2 import (
    definition_pb2,
    service_pb2,
    service_pb2_grpc,
)
from ferrymq.protocol.ferrymq import admin_pb2, admin_pb2_grpc
from tests.support import ROOT

PACKAGE_PREFIX = ".apache.rocketmq.v2."

OFFICIAL_MESSAGES = {
    "AckMessageEntry": (
        "1 string message_id",
        "2 string receipt_handle",
        "3 optional string lite_topic",
    ),
    "AckMessageRequest": (
        "1 Resource group",
        "2 Resource topic",
        "3 repeated AckMessageEntry entries",
    ),
    "AckMessageResponse": (
        "1 Status status",
        "2 repeated AckMessageResultEntry entries",
    ),
    "AckMessageResultEntry": (
        "1 string message_id",
        "2 string receipt_handle",
        "3 Status status",
    ),
    "Address": (
        "1 string host",
        "2 int32 port",
    ),
    "Assignment": ("1 MessageQueue message_queue",),
    "Broker": (
        "1 string name",
        "2 int32 id",
        "3 Endpoints endpoints",
    ),
    "ChangeInvisibleDurationRequest": (
        "1 Resource group",
        "2 Resource topic",
        "3 string receipt_handle",
        "4 google.protobuf.Duration invisible_duration",
        "5 string message_id",
        "6 optional string lite_topic",
        "7 optional bool suspend",
    ),
    "ChangeInvisibleDurationResponse": (
        "1 Status status",
        "2 string receipt_handle",
    ),
    "CustomizedBackoff": ("1 repeated google.protobuf.Duration next",),
    "DeadLetterQueue": (
        "1 string topic",
        "2 string message_id",
    ),
    "Digest": (
        "1 DigestType type",
        "2 string checksum",
    ),
    "EndTransactionRequest": (
        "1 Resource topic",
        "2 string message_id",
        "3 string transaction_id",
        "4 TransactionResolution resolution",
        "5 TransactionSource source",
        "6 string trace_context",
    ),
    "EndTransactionResponse": ("1 Status status",),
    "Endpoints": (
        "1 AddressScheme scheme",
        "2 repeated Address addresses",
    ),
    "ExponentialBackoff": (
        "1 google.protobuf.Duration initial",
        "2 google.protobuf.Duration max",
        "3 float multiplier",
    ),
    "FilterExpression": (
        "1 FilterType type",
        "2 string expression",
    ),
    "ForwardMessageToDeadLetterQueueRequest": (
        "1 Resource group",
        "2 Resource topic",
        "3 string receipt_handle",
        "4 string message_id",
        "5 int32 delivery_attempt",
        "6 int32 max_delivery_attempts",
        "7 optional string lite_topic",
    ),
    "ForwardMessageToDeadLetterQueueResponse": ("1 Status status",),
    "GetOffsetRequest": (
        "1 Resource group",
        "2 MessageQueue message_queue",
    ),
    "GetOffsetResponse": (
        "1 Status status",
        "2 int64 offset",
    ),
    "HeartbeatRequest": (
        "1 optional Resource group",
        "2 ClientType client_type",
    ),
    "HeartbeatResponse": ("1 Status status",),
    "Message": (
        "1 Resource topic",
        "2 map<string,string> user_properties",
        "3 SystemProperties system_properties",
        "4 bytes body",
    ),
    "MessageQueue": (
        "1 Resource topic",
        "2 int32 id",
        "3 Permission permission",
        "4 Broker broker",
        "5 repeated MessageType accept_message_types",
    ),
    "Metric": (
        "1 bool on",
        "2 optional Endpoints endpoints",
    ),
    "NotifyClientTerminationRequest": ("1 optional Resource group",),
    "NotifyClientTerminationResponse": ("1 Status status",),
    "PrintThreadStackTraceCommand": ("1 string nonce",),
    "Publishing": (
        "1 repeated Resource topics",
        "2 int32 max_body_size",
        "3 bool validate_message_type",
    ),
    "PullMessageRequest": (
        "1 Resource group",
        "2 MessageQueue message_queue",
        "3 int64 offset",
        "4 int32 batch_size",
        "5 FilterExpression filter_expression",
        "6 google.protobuf.Duration long_polling_timeout",
    ),
    "PullMessageResponse": (
        "1 Status status",
        "2 Message message",
        "3 int64 next_offset",
    ),
    "QueryAssignmentRequest": (
        "1 Resource topic",
        "2 Resource group",
        "3 Endpoints endpoints",
    ),
    "QueryAssignmentResponse": (
        "1 Status status",
        "2 repeated Assignment assignments",
    ),
    "QueryOffsetRequest": (
        "1 MessageQueue message_queue",
        "2 QueryOffsetPolicy query_offset_policy",
        "3 optional google.protobuf.Timestamp timestamp",
    ),
    "QueryOffsetResponse": (
        "1 Status status",
        "2 int64 offset",
    ),
    "QueryRouteRequest": (
        "1 Resource topic",
        "2 Endpoints endpoints",
    ),
    "QueryRouteResponse": (
        "1 Status status",
        "2 repeated MessageQueue message_queues",
    ),
    # RecallMessage (rocketmq-apis 2.0.4, RocketMQ 5.3.2): as the descriptors of the
    # official rocketmq-python-client 5.1.2 carry them.
    "RecallMessageRequest": (
        "1 Resource topic",
        "2 string recall_handle",
    ),
    "RecallMessageResponse": (
        "1 Status status",
        "2 string message_id",
    ),
    "ReceiveMessageRequest": (
        "1 Resource group",
        "2 MessageQueue message_queue",
        "3 FilterExpression filter_expression",
        "4 int32 batch_size",
        "5 optional google.protobuf.Duration invisible_duration",
        "6 bool auto_renew",
        "7 optional google.protobuf.Duration long_polling_timeout",
        "8 optional string attempt_id",
    ),
    "ReceiveMessageResponse": (
        "1 Status status",
        "2 Message message",
        "3 google.protobuf.Timestamp delivery_timestamp",
    ),
    "ReconnectEndpointsCommand": ("1 string nonce",),
    "RecoverOrphanedTransactionCommand": (
        "1 Message message",
        "2 string transaction_id",
    ),
    "Resource": (
        "1 string resource_namespace",
        "2 string name",
    ),
    "RetryPolicy": (
        "1 int32 max_attempts",
        "2 ExponentialBackoff exponential_backoff",
        "3 CustomizedBackoff customized_backoff",
    ),
    "SendMessageRequest": ("1 repeated Message messages",),
    "SendMessageResponse": (
        "1 Status status",
        "2 repeated SendResultEntry entries",
    ),
    "SendResultEntry": (
        "1 Status status",
        "2 string message_id",
        "3 string transaction_id",
        "4 int64 offset",
        "5 string recall_handle",
    ),
    "Settings": (
        "1 optional ClientType client_type",
        "2 optional Endpoints access_point",
        "3 optional RetryPolicy backoff_policy",
        "4 optional google.protobuf.Duration request_timeout",
        "5 Publishing publishing",
        "6 Subscription subscription",
        "7 UA user_agent",
        "8 Metric metric",
        "9 map<string,string> client_properties",
    ),
    "Status": (
        "1 Code code",
        "2 string message",
    ),
    "Subscription": (
        "1 optional Resource group",
        "2 repeated SubscriptionEntry subscriptions",
        "3 optional bool fifo",
        "4 optional int32 receive_batch_size",
        "5 optional google.protobuf.Duration long_polling_timeout",
        "6 optional int32 lite_subscription_quota",
        "7 optional int32 max_lite_topic_size",
    ),
    "SubscriptionEntry": (
        "1 Resource topic",
        "2 FilterExpression expression",
    ),
    "SystemProperties": (
        "1 optional string tag",
        "2 repeated string keys",
        "3 string message_id",
        "4 Digest body_digest",
        "5 Encoding body_encoding",
        "6 MessageType message_type",
        "7 google.protobuf.Timestamp born_timestamp",
        "8 string born_host",
        "9 optional google.protobuf.Timestamp store_timestamp",
        "10 string store_host",
        "11 optional google.protobuf.Timestamp delivery_timestamp",
        "12 optional string receipt_handle",
        "13 int32 queue_id",
        "14 optional int64 queue_offset",
        "15 optional google.protobuf.Duration invisible_duration",
        "16 optional int32 delivery_attempt",
        "17 optional string message_group",
        "18 optional string trace_context",
        "19 optional google.protobuf.Duration orphaned_transaction_recovery_duration",
        "20 optional DeadLetterQueue dead_letter_queue",
        "21 optional string lite_topic",
        "22 optional int32 priority",
    ),
    "NotifyUnsubscribeLiteCommand": ("1 string lite_topic",),
    "OffsetOption": (
        "1 OffsetOption.Policy policy",
        "2 int64 offset",
        "3 int64 tail_n",
        "4 int64 timestamp",
    ),
    "SyncLiteSubscriptionRequest": (
        "1 LiteSubscriptionAction action",
        "2 Resource topic",
        "3 Resource group",
        "4 repeated string lite_topic_set",
        "5 optional int64 version",
        "6 optional OffsetOption offset_option",
    ),
    "SyncLiteSubscriptionResponse": ("1 Status status",),
    "TelemetryCommand": (
        "1 optional Status status",
        "2 Settings settings",
        "3 ThreadStackTrace thread_stack_trace",
        "4 VerifyMessageResult verify_message_result",
        "5 RecoverOrphanedTransactionCommand recover_orphaned_transaction_command",
        "6 PrintThreadStackTraceCommand print_thread_stack_trace_command",
        "7 VerifyMessageCommand verify_message_command",
        "8 ReconnectEndpointsCommand reconnect_endpoints_command",
        "9 NotifyUnsubscribeLiteCommand notify_unsubscribe_lite_command",
    ),
    "ThreadStackTrace": (
        "1 string nonce",
        "2 optional string thread_stack_trace",
    ),
    "UA": (
        "1 Language language",
        "2 string version",
        "3 string platform",
        "4 string hostname",
    ),
    "UpdateOffsetRequest": (
        "1 Resource group",
        "2 MessageQueue message_queue",
        "3 int64 offset",
    ),
    "UpdateOffsetResponse": ("1 Status status",),
    "VerifyMessageCommand": (
        "1 string nonce",
        "2 Message message",
    ),
    "VerifyMessageResult": ("1 string nonce",),
}
OFFICIAL_ENUMS = {
    "AddressScheme": "ADDRESS_SCHEME_UNSPECIFIED=0 IPv4=1 IPv6=2 DOMAIN_NAME=3",
    "ClientType": (
        "CLIENT_TYPE_UNSPECIFIED=0 PRODUCER=1 PUSH_CONSUMER=2 SIMPLE_CONSUMER=3 "
        "PULL_CONSUMER=4 LITE_PUSH_CONSUMER=5 LITE_SIMPLE_CONSUMER=6"
    ),
    "Code": (
        "CODE_UNSPECIFIED=0 OK=20000 MULTIPLE_RESULTS=30000 BAD_REQUEST=40000 "
        "ILLEGAL_ACCESS_POINT=40001 ILLEGAL_TOPIC=40002 ILLEGAL_CONSUMER_GROUP=40003 "
        "ILLEGAL_MESSAGE_TAG=40004 ILLEGAL_MESSAGE_KEY=40005 ILLEGAL_MESSAGE_GROUP=40006 "
        "ILLEGAL_MESSAGE_PROPERTY_KEY=40007 INVALID_TRANSACTION_ID=40008 "
        "ILLEGAL_MESSAGE_ID=40009 ILLEGAL_FILTER_EXPRESSION=40010 "
        "ILLEGAL_INVISIBLE_TIME=40011 ILLEGAL_DELIVERY_TIME=40012 "
        "INVALID_RECEIPT_HANDLE=40013 MESSAGE_PROPERTY_CONFLICT_WITH_TYPE=40014 "
        "UNRECOGNIZED_CLIENT_TYPE=40015 MESSAGE_CORRUPTED=40016 CLIENT_ID_REQUIRED=40017 "
        "ILLEGAL_POLLING_TIME=40018 ILLEGAL_OFFSET=40019 ILLEGAL_LITE_TOPIC=40020 "
        "INVALID_CLIENT_PROPERTIES=40021 UNAUTHORIZED=40100 PAYMENT_REQUIRED=40200 "
        "FORBIDDEN=40300 NOT_FOUND=40400 MESSAGE_NOT_FOUND=40401 TOPIC_NOT_FOUND=40402 "
        "CONSUMER_GROUP_NOT_FOUND=40403 OFFSET_NOT_FOUND=40404 REQUEST_TIMEOUT=40800 "
        "PAYLOAD_TOO_LARGE=41300 MESSAGE_BODY_TOO_LARGE=41301 MESSAGE_BODY_EMPTY=41302 "
        "PRECONDITION_FAILED=42800 TOO_MANY_REQUESTS=42900 LITE_TOPIC_QUOTA_EXCEEDED=42901 "
        "LITE_SUBSCRIPTION_QUOTA_EXCEEDED=42902 REQUEST_HEADER_FIELDS_TOO_LARGE=43100 "
        "MESSAGE_PROPERTIES_TOO_LARGE=43101 INTERNAL_ERROR=50000 INTERNAL_SERVER_ERROR=50001 "
        "HA_NOT_AVAILABLE=50002 NOT_IMPLEMENTED=50100 PROXY_TIMEOUT=50400 "
        "MASTER_PERSISTENCE_TIMEOUT=50401 SLAVE_PERSISTENCE_TIMEOUT=50402 UNSUPPORTED=50500 "
        "VERSION_UNSUPPORTED=50501 VERIFY_FIFO_MESSAGE_UNSUPPORTED=50502 "
        "FAILED_TO_CONSUME_MESSAGE=60000"
    ),
    "DigestType": "DIGEST_TYPE_UNSPECIFIED=0 CRC32=1 MD5=2 SHA1=3",
    "Encoding": "ENCODING_UNSPECIFIED=0 IDENTITY=1 GZIP=2",
    "FilterType": "FILTER_TYPE_UNSPECIFIED=0 TAG=1 SQL=2",
    "LiteSubscriptionAction": "PARTIAL_ADD=0 PARTIAL_REMOVE=1 COMPLETE_ADD=2 COMPLETE_REMOVE=3",
    "Language": (
        "LANGUAGE_UNSPECIFIED=0 JAVA=1 CPP=2 DOT_NET=3 GOLANG=4 RUST=5 PYTHON=6 PHP=7 "
        "NODE_JS=8 RUBY=9 OBJECTIVE_C=10 DART=11 KOTLIN=12"
    ),
    "MessageType": (
        "MESSAGE_TYPE_UNSPECIFIED=0 NORMAL=1 FIFO=2 DELAY=3 TRANSACTION=4 LITE=5 PRIORITY=6"
    ),
    "Permission": "PERMISSION_UNSPECIFIED=0 NONE=1 READ=2 WRITE=3 READ_WRITE=4",
    "QueryOffsetPolicy": "BEGINNING=0 END=1 TIMESTAMP=2",
    "TransactionResolution": "TRANSACTION_RESOLUTION_UNSPECIFIED=0 COMMIT=1 ROLLBACK=2",
    "TransactionSource": "SOURCE_UNSPECIFIED=0 SOURCE_CLIENT=1 SOURCE_SERVER_CHECK=2",
}
OFFICIAL_ONEOFS = {
    "OffsetOption.offset_type": "policy offset tail_n timestamp",
    "PullMessageResponse.content": "status message next_offset",
    "ReceiveMessageResponse.content": "status message delivery_timestamp",
    "RetryPolicy.strategy": "exponential_backoff customized_backoff",
    "Settings.pub_sub": "publishing subscription",
    "TelemetryCommand.command": (
        "settings thread_stack_trace verify_message_result "
        "recover_orphaned_transaction_command print_thread_stack_trace_command "
        "verify_message_command reconnect_endpoints_command notify_unsubscribe_lite_command"
    ),
}
OFFICIAL_METHODS = {
    "QueryRoute": "QueryRouteRequest -> QueryRouteResponse",
    "Heartbeat": "HeartbeatRequest -> HeartbeatResponse",
    "SendMessage": "SendMessageRequest -> SendMessageResponse",
    "QueryAssignment": "QueryAssignmentRequest -> QueryAssignmentResponse",
    "ReceiveMessage": "ReceiveMessageRequest -> stream ReceiveMessageResponse",
    "AckMessage": "AckMessageRequest -> AckMessageResponse",
    "ForwardMessageToDeadLetterQueue": (
        "ForwardMessageToDeadLetterQueueRequest -> ForwardMessageToDeadLetterQueueResponse"
    ),
    "PullMessage": "PullMessageRequest -> stream PullMessageResponse",
    "UpdateOffset": "UpdateOffsetRequest -> UpdateOffsetResponse",
    "GetOffset": "GetOffsetRequest -> GetOffsetResponse",
    "QueryOffset": "QueryOffsetRequest -> QueryOffsetResponse",
    "EndTransaction": "EndTransactionRequest -> EndTransactionResponse",
    "Telemetry": "stream TelemetryCommand -> stream TelemetryCommand",
    "NotifyClientTermination": "NotifyClientTerminationRequest -> NotifyClientTerminationResponse",
    "ChangeInvisibleDuration": "ChangeInvisibleDurationRequest -> ChangeInvisibleDurationResponse",
    "RecallMessage": "RecallMessageRequest -> RecallMessageResponse",
    "SyncLiteSubscription": "SyncLiteSubscriptionRequest -> SyncLiteSubscriptionResponse",
}


FieldProto = descriptor_pb2.FieldDescriptorProto
SCALAR_NAMES = {number: name[len("TYPE_") :].lower() for name, number in FieldProto.Type.items()}


def type_name(field: FieldProto) -> str:
    if field.type in (FieldProto.TYPE_MESSAGE, FieldProto.TYPE_ENUM):
        name = field.type_name
        return name[len(PACKAGE_PREFIX) :] if name.startswith(PACKAGE_PREFIX) else name[1:]
    return SCALAR_NAMES[field.type]


def served_file_protos() -> list[descriptor_pb2.FileDescriptorProto]:
    protos = []
    for module in (definition_pb2, service_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(proto)
        assert proto.package == "apache.rocketmq.v2"
        protos.append(proto)
    return protos


def served_messages() -> dict[str, descriptor_pb2.DescriptorProto]:
    messages = {}
    for proto in served_file_protos():
        for message in proto.message_type:
            assert not [n for n in message.nested_type if not n.options.map_entry], message.name
            messages[message.name] = message
    return messages


def describe_field(message: descriptor_pb2.DescriptorProto, field: FieldProto) -> str:
    maps = {f".{n.name}": n for n in message.nested_type if n.options.map_entry}
    for suffix, entry in maps.items():
        if field.type_name.endswith(f".{message.name}{suffix}"):
            key, value = entry.field
            return f"{field.number} map<{type_name(key)},{type_name(value)}> {field.name}"
    if field.label == FieldProto.LABEL_REPEATED:
        cardinality = "repeated "
    elif field.proto3_optional:
        cardinality = "optional "
    else:
        cardinality = ""
    return f"{field.number} {cardinality}{type_name(field)} {field.name}"


def test_every_served_message_has_the_official_fields():
    served = served_messages()
    assert sorted(served) == sorted(OFFICIAL_MESSAGES), "a message was added or dropped"
    differences = []
    for name, message in served.items():
        ours = {field.name: describe_field(message, field) for field in message.field}
        official = {line.split()[-1]: line for line in OFFICIAL_MESSAGES[name]}
        for field_name, line in official.items():
            if ours.get(field_name) != line:
                differences.append(f"{name}: official {line!r}, ours {ours.get(field_name)!r}")
        extra = [line for field_name, line in ours.items() if field_name not in official]
        differences += [f"{name}: not official {line!r}" for line in extra]
    assert not differences, "\n".join(differences)


def test_every_served_enum_has_the_official_values():
    served = {e.name: e for proto in served_file_protos() for e in proto.enum_type}
    assert sorted(served) == sorted(OFFICIAL_ENUMS)
    for name, values in OFFICIAL_ENUMS.items():
        ours = " ".join(f"{value.name}={value.number}" for value in served[name].value)
        assert ours == values, name


def test_oneofs_group_the_official_fields():
    served = served_messages()
    ours = {}
    for name, message in served.items():
        for field in message.field:
            if field.HasField("oneof_index") and not field.proto3_optional:
                oneof = message.oneof_decl[field.oneof_index].name
                ours.setdefault(f"{name}.{oneof}", []).append(field.name)
    assert {key: " ".join(names) for key, names in ours.items()} == OFFICIAL_ONEOFS


def test_messaging_service_methods_have_the_official_signatures():
    service = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
    assert service.full_name == "apache.rocketmq.v2.MessagingService"
    ours = {}
    for method in service.methods:
        proto = descriptor_pb2.MethodDescriptorProto()
        method.CopyToProto(proto)
        request = ("stream " if proto.client_streaming else "") + method.input_type.name
        response = ("stream " if proto.server_streaming else "") + method.output_type.name
        ours[method.name] = f"{request} -> {response}"
    assert ours == OFFICIAL_METHODS
    for name in OFFICIAL_METHODS:
        assert hasattr(service_pb2_grpc.MessagingServiceServicer, name)


def test_bytes_on_the_wire_match_the_official_numbers():
    # Tag byte = field number << 3 | wire type (0 varint, 2 length-delimited).
    assert definition_pb2.Message(body=b"x").SerializeToString() == b"\x22\x01x"
    attempt = definition_pb2.SystemProperties(delivery_attempt=1)
    assert attempt.SerializeToString() == b"\x80\x01\x01"  # field 16, varint
    status = definition_pb2.Status(code=definition_pb2.OK)
    assert status.SerializeToString() == b"\x08\xa0\x9c\x01"  # 20000 as a varint
    response = service_pb2.ReceiveMessageResponse(message=definition_pb2.Message(body=b"x"))
    assert response.SerializeToString() == b"\x12\x03\x22\x01x"  # message is field 2


def test_send_request_and_receive_responses_round_trip():
    message = definition_pb2.Message(
        topic=definition_pb2.Resource(resource_namespace="", name="orders"),
        user_properties={"trace": "on"},
        body=b"\x00\xffpayload",
        system_properties=definition_pb2.SystemProperties(
            tag="TagA",
            keys=["k1", "k2"],
            message_id="0102FC0000000120AB0B143D9A00000000",
            message_type=definition_pb2.DELAY,
            body_encoding=definition_pb2.IDENTITY,
            born_timestamp=Timestamp(seconds=1_700_000_000),
            born_host="10.0.0.1",
            delivery_timestamp=Timestamp(seconds=1_700_000_010),
        ),
    )
    request = service_pb2.SendMessageRequest(messages=[message])
    assert service_pb2.SendMessageRequest.FromString(request.SerializeToString()) == request

    delivered = definition_pb2.Message()
    delivered.CopyFrom(message)
    delivered.system_properties.receipt_handle = "handle-1"
    delivered.system_properties.delivery_attempt = 1
    stream = [
        service_pb2.ReceiveMessageResponse(status=definition_pb2.Status(code=definition_pb2.OK)),
        service_pb2.ReceiveMessageResponse(message=delivered),
        service_pb2.ReceiveMessageResponse(delivery_timestamp=Timestamp(seconds=1_700_000_020)),
    ]
    decoded = [
        service_pb2.ReceiveMessageResponse.FromString(item.SerializeToString()) for item in stream
    ]
    assert decoded == stream
    assert [item.WhichOneof("content") for item in decoded] == [
        "status",
        "message",
        "delivery_timestamp",
    ]
    properties = decoded[1].message.system_properties
    assert properties.HasField("receipt_handle")
    assert properties.delivery_attempt == 1
    assert not properties.HasField("message_group")


def test_messages_pickle_under_their_ferrymq_module_names():
    # Spark and multiprocessing pickle objects; a class whose __module__ is the bare proto
    # path (apache.rocketmq.v2...) cannot be found again when unpickled.
    samples = [
        service_pb2.SendMessageRequest(messages=[definition_pb2.Message(body=b"x")]),
        definition_pb2.MessageQueue(id=3, permission=definition_pb2.READ_WRITE),
        admin_pb2.QueueProgress(topic="orders", queue_id=1, lag=7),
    ]
    for sample in samples:
        assert type(sample).__module__.startswith("ferrymq.protocol.")
        assert pickle.loads(pickle.dumps(sample)) == sample
    assert hasattr(admin_pb2_grpc, "AdminServicer")


def load_generate_script():
    spec = importlib.util.spec_from_file_location(
        "ferrymq_proto_generate", os.path.join(ROOT, "proto", "generate.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lower_bound(requirements: list[str], name: str) -> tuple[int, ...]:
    for requirement in requirements:
        found = re.fullmatch(rf"{re.escape(name)}\s*(?:>=|==)\s*([\d.]+)", requirement.strip())
        if found:
            return tuple(int(part) for part in found.group(1).split("."))
    raise AssertionError(f"{name} has no >= or == version in pyproject.toml")


def test_generator_and_runtime_pins_agree_with_pyproject():
    generate = load_generate_script()
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    pinned = project["optional-dependencies"]["test"]
    assert f"grpcio-tools=={generate.GENERATOR_VERSION}" in pinned
    # What the checked-in gencode demands at import must be what installs promise.
    protocol = os.path.join(ROOT, "ferrymq", "protocol")
    with open(os.path.join(protocol, "apache", "rocketmq", "v2", "service_pb2.py")) as f:
        gencode = re.search(r"^# Protobuf Python Version: ([\d.]+)$", f.read(), re.MULTILINE)
    with open(os.path.join(protocol, "apache", "rocketmq", "v2", "service_pb2_grpc.py")) as f:
        grpc_gencode = re.search(r"^GRPC_GENERATED_VERSION = '([\d.]+)'$", f.read(), re.MULTILINE)
    needed_protobuf = tuple(int(part) for part in gencode.group(1).split("."))
    needed_grpcio = tuple(int(part) for part in grpc_gencode.group(1).split("."))
    assert lower_bound(project["dependencies"], "protobuf") >= needed_protobuf
    assert lower_bound(project["dependencies"], "grpcio") >= needed_grpcio


def test_generate_refuses_another_generator_version(monkeypatch):
    generate = load_generate_script()
    assert generate.generator_mismatch() is None
    monkeypatch.setattr(generate.importlib.metadata, "version", lambda name: "0.0.1")
    message = generate.generator_mismatch()
    assert message is not None
    assert f"grpcio-tools=={generate.GENERATOR_VERSION}" in message
    assert "0.0.1" in message
