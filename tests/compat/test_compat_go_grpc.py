"""The official Go 5.x gRPC client (``github.com/apache/rocketmq-clients/golang/v5``
v5.1.2), unchanged, against a real ferrymq node.

The client runs in a process of its own through our driver (``tests/compat/go/grpc5``),
built by ``tests/support/clients.py`` with ``go build`` from the Go module proxy on first
use; each test is one driver run doing several steps. That client always speaks TLS
(accepting any certificate), so the module's node serves TLS with a throwaway
certificate, as a deployment for Go clients must.
"""

from __future__ import annotations

import grpc
import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ferrymq.protocol.ferrymq import admin_pb2_grpc
from tests.support import clients
from tests.support.every_kind import EveryKind
from tests.support.nodes import start_node
from tests.support.rpc import create_group, create_topic, message
from tests.support.tls_certs import make_pki

# The first run fetches the client's modules and builds the driver.
pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 300)

NODE_TOML = """
[messages]
transaction_check_interval_ms = 2000
transaction_max_checks = 3
"""


@pytest.fixture(scope="module")
def go():
    try:
        return clients.driver("go-grpc")
    except clients.ClientUnavailable as error:
        pytest.fail(clients.unavailable(error), pytrace=False)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("go-grpc-pki"))


@pytest.fixture(scope="module")
def node(tmp_path_factory, pki):
    tls = f'[security]\ntls_cert = "{pki.server_cert}"\ntls_key = "{pki.server_key}"\n'
    started = start_node(str(tmp_path_factory.mktemp("go-grpc") / "node"), NODE_TOML + tls)
    yield started
    started.sigkill()


@pytest.fixture
def grpc_stubs(node, pki):
    with open(pki.ca, "rb") as f:
        channel = grpc.secure_channel(node.address, grpc.ssl_channel_credentials(f.read()))
    yield service_pb2_grpc.MessagingServiceStub(channel), admin_pb2_grpc.AdminStub(channel)
    channel.close()


def run_go(go, node, tmp_path, steps: list[dict], timeout_s: float = 150) -> clients.Run:
    return clients.run(
        go, {"endpoints": node.address, "steps": steps}, tmp_path / "go-home", timeout_s
    )


def test_producer_sends_every_kind_and_a_simple_consumer_gets_them_intact(
    go, node, tmp_path, grpc_stubs
):
    """Normal (sync and async), FIFO, delay and transactional sends from the Go producer;
    Go SimpleConsumers receive every one with its id, tag, keys and properties intact,
    FIFO in order per message group, delayed ones not before their time, committed and
    checked-then-committed transactions but never a rolled-back one."""
    _, admin = grpc_stubs
    scenario = EveryKind("go")
    scenario.create(admin)
    run = run_go(go, node, tmp_path, scenario.steps())
    scenario.check(run, reports_born_host_and_queue=False)


def test_simple_consumer_ack_change_invisible_duration_and_redelivery(
    go, node, tmp_path, grpc_stubs
):
    """Three messages received with a short invisibility: one acked, one hidden longer with
    ChangeInvisibleDuration (then acked with the handle that call returned), the third not
    acked comes back with attempt 2, and only it. (v5.1.2's ``Ack`` returns nil whatever
    the answer's status, so a refused ack cannot be seen from this client.)"""
    messaging, admin = grpc_stubs
    create_topic(admin, "go-simple", queues=2)
    create_group(admin, "go-simple-group")
    for i in range(3):
        answer = messaging.SendMessage(
            rpc.SendMessageRequest(messages=[message("go-simple", b"m%d" % i, f"S{i}", tag="T")])
        )
        assert answer.status.code == pb.OK
    ops = [
        {"op": "receive", "count": 3, "invisible_s": 4, "deadline_s": 20},
        {"op": "ack", "bodies": ["m0"]},
        {"op": "change", "body": "m1", "invisible_s": 60},
        {"op": "receive", "count": 1, "invisible_s": 30, "deadline_s": 25, "ack": True},
        {"op": "ack", "bodies": ["m1"]},
        {"op": "receive", "count": 1, "invisible_s": 30, "deadline_s": 5, "ack": True},
    ]
    run = run_go(
        go,
        node,
        tmp_path,
        [{"do": "simple", "topic": "go-simple", "group": "go-simple-group", "ops": ops}],
    )
    assert not run.of("step_failed"), run.explain()
    received = run.of("received")
    assert sorted(e["id"] for e in received[:3]) == ["S0", "S1", "S2"], run.explain()
    assert all(e["attempt"] == 1 and e["tag"] == "T" for e in received[:3])
    assert [(e["id"], e["attempt"]) for e in received[3:]] == [("S2", 2)], run.explain()
    assert run.of("changed") and [e["body"] for e in run.of("acked")] == ["m0", "m2", "m1"]
    assert not run.of("ack_failed") and not run.of("change_failed"), run.explain()
