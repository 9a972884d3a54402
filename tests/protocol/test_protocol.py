"""The protocol modules are generated from proto/ and current, and speak the official
RocketMQ 5 wire format (field numbers checked against apache/rocketmq-apis)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2, service_pb2, service_pb2_grpc
from ferrymq.protocol.ferrymq import admin_pb2, admin_pb2_grpc
from tests.support import ROOT

GENERATE = os.path.join(ROOT, "proto", "generate.py")


def run_check(output: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, GENERATE, "--check", "--output", output],
        capture_output=True,
        text=True,
    )


def test_checked_in_modules_are_current():
    result = run_check(os.path.join(ROOT, "ferrymq", "protocol"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_check_fails_on_stale_modules(tmp_path):
    copy = tmp_path / "protocol"
    shutil.copytree(os.path.join(ROOT, "ferrymq", "protocol"), copy)
    stale = copy / "apache" / "rocketmq" / "v2" / "service_pb2.py"
    stale.write_text(stale.read_text() + "\n# edited by hand\n")
    result = run_check(str(copy))
    assert result.returncode == 1
    assert "apache/rocketmq/v2/service_pb2.py" in result.stdout


def field_number(message, name: str) -> int:
    return message.DESCRIPTOR.fields_by_name[name].number


def test_official_field_numbers():
    assert field_number(definition_pb2.Message, "topic") == 1
    assert field_number(definition_pb2.Message, "user_properties") == 2
    assert field_number(definition_pb2.Message, "system_properties") == 3
    assert field_number(definition_pb2.Message, "body") == 4
    assert field_number(definition_pb2.SystemProperties, "message_id") == 3
    assert field_number(definition_pb2.SystemProperties, "receipt_handle") == 12
    assert field_number(definition_pb2.SystemProperties, "delivery_attempt") == 16
    assert field_number(definition_pb2.SystemProperties, "message_group") == 17
    assert field_number(definition_pb2.MessageQueue, "accept_message_types") == 5
    assert field_number(service_pb2.ReceiveMessageRequest, "long_polling_timeout") == 7
    assert field_number(service_pb2.TelemetryCommand, "recover_orphaned_transaction_command") == 5
    assert definition_pb2.Code.Value("OK") == 20000
    assert definition_pb2.Code.Value("INVALID_RECEIPT_HANDLE") == 40013
    assert definition_pb2.Code.Value("TOPIC_NOT_FOUND") == 40402
    assert definition_pb2.MessageType.Value("TRANSACTION") == 4


def test_round_trip_of_a_send_and_a_receive():
    sent = service_pb2.SendMessageRequest(
        messages=[
            definition_pb2.Message(
                topic=definition_pb2.Resource(name="orders"),
                body=b"\x00payload",
                user_properties={"a": "b"},
                system_properties=definition_pb2.SystemProperties(
                    tag="TagA",
                    keys=["k1", "k2"],
                    message_id="01ABCDEF",
                    message_type=definition_pb2.FIFO,
                    message_group="g1",
                ),
            )
        ]
    )
    decoded = service_pb2.SendMessageRequest.FromString(sent.SerializeToString())
    assert decoded == sent
    assert decoded.messages[0].system_properties.HasField("tag")
    response = service_pb2.ReceiveMessageResponse(
        status=definition_pb2.Status(code=definition_pb2.OK, message="OK")
    )
    assert (
        service_pb2.ReceiveMessageResponse.FromString(response.SerializeToString()).WhichOneof(
            "content"
        )
        == "status"
    )


def test_services_are_generated():
    methods = {m.name for m in service_pb2.DESCRIPTOR.services_by_name["MessagingService"].methods}
    assert {
        "QueryRoute",
        "SendMessage",
        "ReceiveMessage",
        "AckMessage",
        "Telemetry",
        "PullMessage",
        "ChangeInvisibleDuration",
        "EndTransaction",
    } <= methods
    assert hasattr(service_pb2_grpc, "MessagingServiceServicer")
    assert hasattr(admin_pb2_grpc, "AdminServicer")
    assert admin_pb2.Status(code=5, message="topic not found").code == 5
