"""The SDK's data path on the remoting port: the same sends, answers and errors as on gRPC."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from ferrymq.client import Admin, FerryError, Message, Producer, PullConsumer, remoting_channel
from ferrymq.client.routes import Endpoints
from ferrymq.client.security import ClientSecurity
from ferrymq.codec.remoting_codes import CLIENT_TIMEOUT_FIELD, FerryRequestCode
from tests.support.auth import AUTH_TOML, ROOT
from tests.support.nodes import start_node

TOO_LARGE = 4 * 1024 * 1024 + 1  # one byte over the node's default body limit


@pytest.fixture(scope="module")
def topic(address) -> str:
    with Admin(address) as admin:
        admin.create_topic("sdk-remoting", queue_count=2)
        admin.create_group("sdk-remoting-readers")
    return "sdk-remoting"


def remoting_peers(producer: Producer | PullConsumer) -> set[str]:
    """The remoting addresses the client's blocking channels are connected to."""
    peers = set()
    for channel in producer.endpoints._channels.values():
        if channel._socket is not None:
            host, port = channel._socket.getpeername()[:2]
            peers.add(f"{host}:{port}")
    return peers


def test_sends_batches_and_fetches_go_to_the_remoting_port(module_node, topic):
    address = module_node.address
    with Producer(address) as producer:
        single = producer.send(Message(topic, b"one", tag="T", keys=["k1"]))
        batch = producer.send_batch([Message(topic, b"b%d" % i) for i in range(3)])
        assert remoting_peers(producer) == {module_node.remoting}
        assert producer.remoting_address(address) == module_node.remoting

        async def coalesced():
            return await asyncio.gather(
                *(producer.send_async(Message(topic, b"a%d" % i)) for i in range(20))
            )

        receipts = asyncio.run(coalesced())
    ids = {single.message_id, *(r.message_id for r in batch + receipts)}
    assert len(ids) == 24
    with PullConsumer(address, "sdk-remoting-readers", start="beginning") as consumer:
        consumer.assign(topic, [0, 1])
        got = []
        for _ in range(50):
            got += consumer.poll(wait_s=0.2)
            if len(got) >= 24:
                break
        assert consumer.endpoints.channel(address) is not None
    assert {m.message_id for m in got} >= ids
    one = next(m for m in got if m.message_id == single.message_id)
    assert (one.body, one.tag, one.keys) == (b"one", "T", ["k1"])


@pytest.mark.parametrize("transport", ["remoting", "grpc"])
def test_both_doors_refuse_alike(address, topic, transport):
    """Unknown topic, an oversized body in a batch, and one oversized send among coalesced
    ones: the same codes on both doors, and the coalesced neighbours still stored."""
    with Producer(address, transport=transport, max_attempts=1) as producer:
        with pytest.raises(FerryError) as unknown:
            producer.send(Message("no-such-topic-here", b"x"))
        assert unknown.value.code_name == "TOPIC_NOT_FOUND"
        assert (producer.remoting_address(address) is None) == (transport == "grpc")
        with pytest.raises(FerryError) as large:
            producer.send_batch([Message(topic, b"ok"), Message(topic, b"x" * TOO_LARGE)])
        assert large.value.code_name == "MESSAGE_BODY_TOO_LARGE"

        async def mixed():
            sends = [
                producer.send_async(Message(topic, b"x" * TOO_LARGE if i == 1 else b"fine"))
                for i in range(3)
            ]
            return await asyncio.gather(*sends, return_exceptions=True)

        first, refused, last = asyncio.run(mixed())
    assert isinstance(refused, FerryError) and refused.code_name == "MESSAGE_BODY_TOO_LARGE"
    assert first.queue_offset >= 0 and last.queue_offset >= 0


def test_every_produce_names_the_clients_timeout(address, topic, monkeypatch):
    """Single, batched and coalesced sends all say how long their client waits: a node
    forwarding one to its master waits that long, and the master refuses it after
    (tests/cluster/test_remoting_forwarding.py)."""
    framed = []
    frame = remoting_channel.request_frame

    def recording(code, opaque, fields, body, security=remoting_channel.PLAIN):
        framed.append((code, dict(fields or {})))
        return frame(code, opaque, fields, body, security)

    monkeypatch.setattr(remoting_channel, "request_frame", recording)
    with Producer(address, timeout_s=7.5) as producer:
        producer.send(Message(topic, b"one"))
        producer.send_batch([Message(topic, b"b%d" % i) for i in range(2)])

        async def coalesced():
            await asyncio.gather(*(producer.send_async(Message(topic, b"a")) for _ in range(3)))

        asyncio.run(coalesced())
    produces = [fields for code, fields in framed if code == FerryRequestCode.FERRY_PRODUCE]
    assert len(produces) >= 3
    assert {fields.get(CLIENT_TIMEOUT_FIELD) for fields in produces} == {"7500"}
    others = [fields for code, fields in framed if code != FerryRequestCode.FERRY_PRODUCE]
    assert not any(CLIENT_TIMEOUT_FIELD in fields for fields in others)


def test_a_client_with_credentials_or_tls_uses_the_remoting_door():
    signed = Endpoints("127.0.0.1:1", 1.0, ClientSecurity(access_key="a", secret_key="b"))
    tls = Endpoints("127.0.0.1:1", 1.0, ClientSecurity(tls_ca="system"))
    plain = Endpoints("127.0.0.1:1", 1.0, ClientSecurity())
    assert signed.uses_remoting and tls.uses_remoting and plain.uses_remoting
    assert not Endpoints("127.0.0.1:1", 1.0, ClientSecurity(), transport="grpc").uses_remoting
    with pytest.raises(ValueError):
        Endpoints("127.0.0.1:1", 1.0, ClientSecurity(), transport="carrier-pigeon")


def test_a_wrong_remoting_address_is_a_transport_failure_then_corrected(module_node, topic):
    """A remoting address that answers nothing (as after a node moved): the send fails as
    a transport failure, retriable; the retry asks ClusterStatus again and succeeds."""
    with Producer(module_node.address, max_attempts=1) as once:
        once.send(Message(topic, b"warm"))
        once.endpoints._remoting_addresses[module_node.address] = "127.0.0.1:1"
        with pytest.raises(FerryError) as failed:
            once.send(Message(topic, b"refused"))
    assert failed.value.code_name == "UNAVAILABLE" and failed.value.retriable
    with Producer(module_node.address, max_attempts=2) as producer:
        producer.send(Message(topic, b"warm"))
        producer.endpoints._remoting_addresses[module_node.address] = "127.0.0.1:1"
        assert producer.send(Message(topic, b"after")).queue_offset >= 0
        assert producer.remoting_address(module_node.address) == module_node.remoting


def test_a_node_restarted_with_another_remoting_port_is_found_again(tmp_path):
    """SIGKILL and restart on the same gRPC port: the remoting port is a new one (0 picks
    it); the producer's retries ask ClusterStatus again and send there; the consumer too."""
    data_dir = str(tmp_path / "node")
    node = start_node(data_dir)
    try:
        with Admin(node.address) as admin:
            admin.create_topic("restarted", queue_count=1)
            admin.create_group("restarted-readers")
        with (
            Producer(node.address, max_attempts=10) as producer,
            PullConsumer(node.address, "restarted-readers", start="beginning") as consumer,
        ):
            first = producer.send(Message("restarted", b"before"))
            consumer.assign("restarted", [0])
            assert [m.body for m in consumer.poll(wait_s=1)] == [b"before"]
            old_remoting = node.remoting
            node.sigkill()
            port = int(node.address.rsplit(":", 1)[1])
            node = start_node(data_dir, port=port)
            assert node.remoting != old_remoting
            second = producer.send(Message("restarted", b"after"))
            assert second.queue_offset == first.queue_offset + 1
            assert producer.remoting_address(node.address) == node.remoting
            got = []
            deadline = time.monotonic() + 30
            while not got and time.monotonic() < deadline:
                with contextlib.suppress(FerryError):
                    got = consumer.poll(wait_s=1)
            assert [m.body for m in got] == [b"after"]
    finally:
        node.sigkill()


def test_close_closes_the_remoting_connections_of_its_loops(address, topic):
    async def run() -> bool:
        producer = Producer(address)
        await producer.send_async(Message(topic, b"x"))
        [channel] = producer.loop_state()._channels.values()
        transport = channel._protocol.transport
        producer.close()
        return transport.is_closing()

    assert asyncio.run(run())


def test_a_client_without_credentials_is_refused_by_a_secured_node(tmp_path):
    """With auth on, a plaintext client without credentials gets the refusal QueryRoute
    gives on either door, does not retry it, and nothing is stored."""
    node = start_node(str(tmp_path / "node"), AUTH_TOML)
    try:
        with Admin(node.address, security=ROOT) as admin:
            admin.create_topic("guarded", 1)
        for transport in ("remoting", "grpc"):
            with (
                Producer(node.address, security=ClientSecurity(), transport=transport) as p,
                pytest.raises(FerryError) as refused,
            ):
                p.send(Message("guarded", b"x"))
            assert refused.value.code_name == "UNAUTHORIZED", (transport, refused.value)
            assert not refused.value.retriable
        with Admin(node.address, security=ROOT) as admin:
            _, queues = admin.describe_topic("guarded")
        assert sum(q.max_offset for q in queues) == 0
    finally:
        node.sigkill()
