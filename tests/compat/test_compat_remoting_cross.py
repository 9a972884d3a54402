"""RocketMQ 4.x clients on ferrymq's remoting port, and messages crossing protocols.

One run of the Java 4.x client (``java-remoting`` driver) covers a TransactionMQProducer
whose transactions commit, roll back, and stay unknown until the node's check (answered
commit), an SQL92 push consumer, queryMessage by key, a push consumer of messages the SDK
and the official 5.x client sent over gRPC, and sends that the official 5.x client and
the SDK read back over gRPC (a compressed body among them, read plain). Ids, tags, keys
and properties are compared on every crossing."""

from __future__ import annotations

import pytest

from ferrymq.client import Message, Producer, PullConsumer
from ferrymq.launcher.polling import until
from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support import clients
from tests.support.nodes import start_node
from tests.support.official_client import run_official_at
from tests.support.rpc import create_topic, stubs

pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 300)

NODE_TOML = """
[messages]
transaction_check_interval_ms = 2000
transaction_max_checks = 5
"""
LARGE = "z" * 6000  # over 4 KiB: the Java client sends it zlib compressed


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    started = start_node(str(tmp_path_factory.mktemp("remoting-cross") / "node"), NODE_TOML)
    channel, _, admin = stubs(started.address)
    create_topic(admin, "tx", queues=2, message_type=api.TRANSACTION)
    for topic in ("sql", "x4", "x5"):
        create_topic(admin, topic, queues=2)
    for group in ("j4-tx-reader", "j4-sql", "j4-x5", "g5-x4", "sdk-x4"):
        assert (
            admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name=group))).status.code == 0
        )
    yield started
    channel.close()
    started.sigkill()


def by_body(events: list[dict]) -> dict[str, dict]:
    return {e["body"]: e for e in events}


def test_java_4x_transactions_sql92_queries_and_messages_across_protocols(node, tmp_path):
    try:
        java = clients.driver("java-remoting")
    except clients.ClientUnavailable as error:
        pytest.fail(clients.unavailable(error), pytrace=False)
    # The 5.x side sends first: the SDK and the official Python client, over gRPC.
    with Producer(node.address) as producer:
        sdk_receipt = producer.send(
            Message("x5", b"from-sdk", tag="t-sdk", keys=["k-sdk"], properties={"origin": "sdk"})
        )
    official = run_official_at(
        node.address,
        tmp_path / "py5-produce",
        {
            "scenario": "produce",
            "topics": ["x5"],
            "messages": [
                {"topic": "x5", "body": "from-5x", "tag": "t-5x", "keys": "k-5x"}
                | {"properties": {"origin": "5x"}}
            ],
        },
    )
    [official_sent] = [e for e in official if e["event"] == "sent"]
    x4 = [
        {"topic": "x4", "body": "plain-4x", "tags": "t-4x", "keys": ["k1", "k2"]}
        | {"properties": {"origin": "4x"}},
        {"topic": "x4", "body": LARGE, "tags": "t-big", "keys": ["k-big"]},
    ]
    steps = [
        {
            "do": "transaction",
            "group": "j4-tx",
            "topic": "tx",
            "messages": [
                {"body": "tx-commit", "keys": ["k-commit"], "local": "COMMIT_MESSAGE"},
                {"body": "tx-rollback", "local": "ROLLBACK_MESSAGE"},
                {"body": "tx-orphan", "local": "UNKNOW"},
            ],
            "check_answer": "COMMIT_MESSAGE",
            "checks": 1,
            "wait_for_check_s": 30,
        },
        {
            "do": "produce",
            "group": "j4-producer",
            "messages": x4
            + [
                {"topic": "sql", "body": f"s-{i}", "keys": ["shared"], "properties": {"n": str(i)}}
                for i in range(4)
            ],
        },
        {
            "do": "push",
            "group": "j4-sql",
            "topic": "sql",
            "sql": True,
            "expression": "n BETWEEN 1 AND 2",
            "expect": ["s-1", "s-2"],
            "deadline_s": 60,
            "linger_s": 2,
        },
        {
            "do": "push",
            "group": "j4-tx-reader",
            "topic": "tx",
            "expect": ["tx-commit", "tx-orphan"],
            "deadline_s": 60,
            "linger_s": 2,
        },
        {
            "do": "push",
            "group": "j4-x5",
            "topic": "x5",
            "expect": ["from-sdk", "from-5x"],
            "deadline_s": 60,
        },
        {"do": "query_key", "topic": "sql", "key": "shared", "count": 4},
    ]
    run = clients.run(java, {"namesrv": node.remoting, "steps": steps}, tmp_path / "j4", 240)
    assert not run.of("step_failed") and not run.of("send_failed"), run.explain()
    # Transactions: commit and the checked orphan are delivered, the rollback never is.
    states = {e["body"]: e["state"] for e in run.of("local_state")}
    assert states == {
        "tx-commit": "COMMIT_MESSAGE",
        "tx-rollback": "ROLLBACK_MESSAGE",
        "tx-orphan": "UNKNOW",
    }
    checked = run.of("checked")
    assert [e["body"] for e in checked] == ["tx-orphan"], checked
    consumed = run.of("consumed")
    tx_read = sorted(e["body"] for e in consumed if e["topic"] == "tx")
    assert tx_read == ["tx-commit", "tx-orphan"], run.explain()
    sent = by_body(run.of("sent"))
    assert by_body(consumed)["tx-commit"]["id"] == sent["tx-commit"]["id"]
    assert by_body(consumed)["tx-commit"]["keys"] == ["k-commit"]
    # SQL92: only the two messages the expression selects.
    assert sorted(e["body"] for e in consumed if e["topic"] == "sql") == ["s-1", "s-2"]
    # Query by key: every message with the key, from the index.
    assert sorted(e["body"] for e in run.of("queried")) == ["s-0", "s-1", "s-2", "s-3"]
    # 5.x and SDK messages read by the 4.x push consumer, intact.
    got5 = by_body([e for e in consumed if e["topic"] == "x5"])
    assert got5["from-sdk"]["id"] == sdk_receipt.message_id
    assert (got5["from-sdk"]["tags"], got5["from-sdk"]["keys"]) == ("t-sdk", ["k-sdk"])
    assert got5["from-sdk"]["properties"]["origin"] == "sdk"
    assert got5["from-5x"]["id"] == official_sent["id"]
    assert (got5["from-5x"]["tags"], got5["from-5x"]["keys"]) == ("t-5x", ["k-5x"])
    assert got5["from-5x"]["properties"]["origin"] == "5x"
    # 4.x messages read by the official 5.x client and by the SDK, intact and plain.
    read5 = run_official_at(
        node.address,
        tmp_path / "py5-read",
        {
            "scenario": "simple",
            "group": "g5-x4",
            "topic": "x4",
            "steps": [{"do": "receive_until", "count": 2, "invisible_s": 30, "deadline_s": 30}],
        },
    )
    received = by_body([e for e in read5 if e["event"] == "received"])
    assert set(received) == {"plain-4x", LARGE}
    plain = received["plain-4x"]
    assert plain["id"] == sent["plain-4x"]["id"]
    assert (plain["tag"], plain["keys"], plain["properties"]) == (
        "t-4x",
        ["k1", "k2"],
        {"origin": "4x"},
    )
    assert received[LARGE]["id"] == sent[LARGE]["id"] and not received[LARGE]["corrupted"]
    with PullConsumer(node.address, "sdk-x4", start="beginning") as consumer:
        consumer.assign("x4", [0, 1])
        read: list = []
        until(lambda: read.extend(consumer.poll(0.5)) or len(read) >= 2, 30, "the SDK's read")
    sdk_read = {m.body.decode(): m for m in read}
    assert sdk_read["plain-4x"].message_id == sent["plain-4x"]["id"]
    assert (sdk_read["plain-4x"].tag, sdk_read["plain-4x"].keys) == ("t-4x", ["k1", "k2"])
    assert sdk_read["plain-4x"].properties == {"origin": "4x"}
    assert sdk_read[LARGE].message_id == sent[LARGE]["id"]
