"""Sends on the remoting port of a node that is not the master, forwarded to the master
(``node/remoting/forwarding.py``) on a real 3-node cluster: a 4.x send and a FERRY_PRODUCE
through a slave are stored on the master with the client's address as born host; a
transaction half is not forwarded (its checks would reach the slave, not the producer);
a client cannot pass its own request off as forwarded; a forwarded send that reaches the
master after its client's timeout is refused unstored."""

from __future__ import annotations

import time

import pytest

from ferrymq.client import Admin, Producer
from ferrymq.client.errors import TRANSPORT, FerryError
from ferrymq.client.messages import Message
from ferrymq.client.produce_records import encode_record
from ferrymq.codec.commitlog_record import decode
from ferrymq.codec.remoting import SERIALIZE_ROCKETMQ
from ferrymq.codec.remoting_codes import (
    CLIENT_TIMEOUT_FIELD,
    FerryRequestCode,
    RequestCode,
    ResponseCode,
)
from ferrymq.launcher.cluster import cluster_up
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import data_pb2 as data
from node.forward_proof import PROOF_HEADER, ForwardProofs
from node.remoting.authentication import PEER_FIELD, PROOF_FIELD, method_of
from tests.support.cluster import SMALL_STORE, master_of, stop_all, topic_everywhere
from tests.support.remoting_client import RemotingClient, pull_fields, send_v2, send_v2_fields


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    settings = {**SMALL_STORE, "replication": {"mode": "SYNC"}}
    started = cluster_up(
        str(tmp_path_factory.mktemp("forwarding") / "cluster"),
        nodes=3,
        auto_ports=True,
        settings=settings,
    )
    with Admin(started.nodes[0].grpc) as admin:
        admin.create_topic("fw", 1)
        topic_everywhere(started, "fw")
    yield started
    stop_all(started)


def slave_and_master(plan):
    master = master_of(plan)
    return next(n for n in plan.nodes if n.id != master.id), master


def last_record(address: str):
    with RemotingClient(address) as client:
        end = int(
            client.call(RequestCode.GET_MAX_OFFSET, {"topic": "fw", "queueId": "0"}).ext_fields[
                "offset"
            ]
        )
        answer = client.call(RequestCode.PULL_MESSAGE, pull_fields("g", "fw", 0, end - 1))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return decode(answer.body, 0)


def produce(client: RemotingClient, body: bytes, fields: dict[str, str] | None = None):
    """The ProduceResponse to a FERRY_PRODUCE of one message to queue 0 of ``fw``."""
    records = encode_record(Message("fw", body), pb.NORMAL, int(time.time() * 1000))
    request = data.ProduceRequest(topic="fw", queue_id=0, atomic=True, count=1, records=records)
    answer = client.call(
        FerryRequestCode.FERRY_PRODUCE,
        fields,
        request.SerializeToString(),
        serialize_type=SERIALIZE_ROCKETMQ,
    )
    return data.ProduceResponse.FromString(answer.body)


def test_a_4x_send_through_a_slave_is_stored_on_the_master_as_the_clients(plan):
    slave, master = slave_and_master(plan)
    with RemotingClient(slave.remoting, source="127.0.0.3") as client:
        answer = send_v2(client, "fw", b"through a slave", 0)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert answer.ext_fields["queueId"] == "0"
    stored = last_record(master.remoting)
    assert stored.body == b"through a slave"
    assert stored.born_host[:4] == bytes([127, 0, 0, 3])  # the client's, not the slave's


def test_a_produce_through_a_slave_is_stored_on_the_master(plan):
    slave, master = slave_and_master(plan)
    with RemotingClient(slave.remoting) as client:
        produced = produce(client, b"produced via a slave")
    assert produced.code == pb.OK, produced.message
    assert last_record(master.remoting).body == b"produced via a slave"


def test_a_transaction_half_through_a_slave_is_refused_there(plan):
    slave, _ = slave_and_master(plan)
    with RemotingClient(slave.remoting) as client:
        answer = send_v2(client, "fw", b"half", 0, TRAN_MSG="true", PGROUP="p")
    assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert "slave" in answer.remark


def test_a_client_cannot_pass_its_request_off_as_forwarded(plan):
    _, master = slave_and_master(plan)
    with RemotingClient(master.remoting) as client:
        answer = client.call(
            RequestCode.SEND_MESSAGE_V2,
            {
                "a": "p",
                "b": "fw",
                "e": "0",
                "f": "0",
                "g": "0",
                "i": "",
                "ferryForwardedFor": "10.9.9.9:1",
                "ferryForwardProof": "v1 node-2 1 00",
            },
            b"forged",
        )
    assert answer.code == ResponseCode.NO_PERMISSION
    assert "forward proof refused" in answer.remark
    assert last_record(master.remoting).body != b"forged"


def held_up_fields(plan, slave, code: int, held_s: float) -> dict[str, str]:
    """The fields the slave added to a request it forwarded ``held_s`` ago (the bytes
    held up on a cut path between the nodes, delivered when it heals)."""
    proofs = ForwardProofs(plan.secret, slave.id, clock=lambda: time.time() - held_s)
    proof = dict(proofs.headers(method_of(code), "127.0.0.3:41000"))
    return {PEER_FIELD: "127.0.0.3:41000", PROOF_FIELD: proof[PROOF_HEADER]}


def test_a_forwarded_send_that_reaches_the_master_after_its_clients_timeout_is_refused(plan):
    """A 4.x producer gives up after 3 s (its default; its request does not say) and
    sends its next message: a send that reaches the master later must not be stored
    behind it. The SDK names its timeout, so its send is bounded by that instead."""
    slave, master = slave_and_master(plan)
    with RemotingClient(master.remoting) as client:
        late = held_up_fields(plan, slave, RequestCode.SEND_MESSAGE_V2, held_s=3.0)
        fields = {**send_v2_fields("fw"), **late}
        answer = client.call(RequestCode.SEND_MESSAGE_V2, fields, b"given up on")
        assert answer.code == ResponseCode.SYSTEM_BUSY, answer.remark
        assert answer.remark.startswith("[TIMEOUT_CLEAN_QUEUE]not stored")
        assert last_record(master.remoting).body != b"given up on"
        in_time = held_up_fields(plan, slave, RequestCode.SEND_MESSAGE_V2, held_s=1.0)
        fields = {**send_v2_fields("fw"), **in_time}
        answer = client.call(RequestCode.SEND_MESSAGE_V2, fields, b"held up, in time")
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        fields = {
            **held_up_fields(plan, slave, FerryRequestCode.FERRY_PRODUCE, held_s=3.0),
            CLIENT_TIMEOUT_FIELD: "10000",  # the SDK's client waits 10 s
        }
        produced = produce(client, b"waited for", fields)
    assert produced.code == pb.OK, produced.message
    assert last_record(master.remoting).body == b"waited for"


def test_the_sdk_writes_through_another_node_while_its_master_is_unreachable(plan):
    """A master the client cannot reach (its connection failed: clients cut off from it)
    is avoided for a while: sends go to another access point, whose node forwards them.
    Before, every send waited for its timeout until the network healed."""
    slave, master = slave_and_master(plan)
    with Producer(f"{master.grpc},{slave.grpc}", max_attempts=1, timeout_s=5) as producer:
        producer.send(Message("fw", b"direct"))
        producer.failed(master.grpc, FerryError(TRANSPORT, "UNAVAILABLE", "cut off"))
        assert producer.reachable(master.grpc) == slave.grpc
        receipt = producer.send(Message("fw", b"around the cut"))
    assert receipt.queue_offset >= 0
    assert last_record(master.remoting).body == b"around the cut"
