"""One message cannot freeze a node through an SQL92 filter: a real node stores messages
whose properties are long runs of digits, and pulls (remoting PULL_MESSAGE with its own
SQL92 subscription, gRPC PullMessage and ReceiveMessage with an SQL filter) compare them
with numbers. Each answers at once, without those messages, and another client's request
on the same node is answered meanwhile.

Before the filters read numbers in linear time, a 30,000-digit property compared with a
double held the node's event loop for about 18 s per message (every client of the node
waited), and a 5,000-digit one compared with a long escaped the filter as a ValueError
(``int()``'s digit limit), failing every pull of its queue. The bound below is generous:
the node answers in milliseconds, the old code took minutes over these messages."""

from __future__ import annotations

import concurrent.futures

import grpc
import pytest

from ferrymq.codec.commitlog_record import decode
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient, send_v2
from tests.support.rpc import create_group, create_topic, queue_of, receive, stubs

BOUND_S = 5.0
TOPIC = "Digits"
LONG_DIGITS = "1" * 30_000 + "x"  # nearly a double: the old pattern retried every split
TOO_MANY_DIGITS = "1" * 5_000  # a long, past int()'s 4,300 digits
WHOLE = b"whole"  # the one message every filter here selects
EXPRESSIONS = ["n > 1.5", "m > 1"]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    started = start_node(str(tmp_path_factory.mktemp("sql-liveness") / "node"))
    channel, messaging, admin = stubs(started.address)
    create_topic(admin, TOPIC, queues=1)
    for group in ("G", *(f"R{i}" for i in range(len(EXPRESSIONS)))):
        create_group(admin, group)
    with RemotingClient(started.remoting) as client:
        for i, properties in enumerate(
            [{"n": LONG_DIGITS}, {"n": LONG_DIGITS}, {"m": TOO_MANY_DIGITS}, {"n": "7", "m": "7"}]
        ):
            body = WHOLE if i == 3 else b"digits-%d" % i
            answer = send_v2(client, TOPIC, body, 0, UNIQ_KEY=f"D-{i}", **properties)
            assert answer.code == ResponseCode.SUCCESS, answer
    yield started, messaging
    channel.close()
    started.stop()


def other_client_answered(node) -> None:
    """A request of another client, on the same node, answered within the bound."""
    started, messaging = node
    with RemotingClient(started.remoting, timeout_s=BOUND_S) as other:
        answer = other.call(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"})
        assert answer.code == ResponseCode.SUCCESS, answer
    route = messaging.QueryRoute(
        rpc.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), timeout=BOUND_S
    )
    assert route.status.code == pb.OK, route.status


def remoting_pull(client: RemotingClient, expression: str) -> int:
    return client.send(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "G",
            "topic": TOPIC,
            "queueId": "0",
            "queueOffset": "0",
            "maxMsgNums": "32",
            "sysFlag": "4",  # the pull's own subscription
            "commitOffset": "0",
            "suspendTimeoutMillis": "0",
            "subscription": expression,
            "subVersion": "1",
            "expressionType": "SQL92",
        },
    )


def bodies(body: bytes) -> list[bytes]:
    found, position = [], 0
    while position < len(body):
        record = decode(body, position)
        found.append(record.body)
        position += record.size
    return found


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_a_remoting_pull_over_long_numeric_properties_answers_and_the_node_stays_live(
    node, expression
):
    started, _ = node
    with RemotingClient(started.remoting, timeout_s=BOUND_S) as client:
        opaque = remoting_pull(client, expression)
        other_client_answered(node)
        answer = client.response()
    assert answer.opaque == opaque
    assert answer.code == ResponseCode.SUCCESS, answer
    assert bodies(answer.body) == [WHOLE]
    assert answer.ext_fields["nextBeginOffset"] == "4"


def grpc_pull(messaging, expression: str) -> list[rpc.PullMessageResponse]:
    request = rpc.PullMessageRequest(
        group=pb.Resource(name="G"),
        message_queue=queue_of(TOPIC, 0),
        offset=0,
        batch_size=32,
        filter_expression=pb.FilterExpression(type=pb.SQL, expression=expression),
    )
    return list(messaging.PullMessage(request, timeout=BOUND_S))


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_a_grpc_pull_over_long_numeric_properties_answers_and_the_node_stays_live(node, expression):
    _, messaging = node
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pulling = pool.submit(grpc_pull, messaging, expression)
        other_client_answered(node)
        parts = pulling.result(BOUND_S)
    statuses = [p.status for p in parts if p.WhichOneof("content") == "status"]
    assert [s.code for s in statuses] == [pb.OK], statuses
    assert [p.message.body for p in parts if p.WhichOneof("content") == "message"] == [WHOLE]
    assert [p.next_offset for p in parts if p.WhichOneof("content") == "next_offset"] == [4]


@pytest.mark.parametrize("index", range(len(EXPRESSIONS)))
def test_a_receive_over_long_numeric_properties_answers_and_the_node_stays_live(node, index):
    _, messaging = node

    def pop() -> tuple:
        group, expression = f"R{index}", EXPRESSIONS[index]
        try:
            return receive(
                messaging, TOPIC, group, filter_type=pb.SQL, tags=expression, timeout=BOUND_S
            )
        except grpc.RpcError as error:  # the old code: UNKNOWN, its ValueError
            pytest.fail(f"{error.code()}: {error.details()}")

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        receiving = pool.submit(pop)
        other_client_answered(node)
        status, messages, _ = receiving.result(BOUND_S)
    assert status.code == pb.OK, status
    assert [m.body for m in messages] == [WHOLE]
