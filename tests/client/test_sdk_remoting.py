"""The SDK's data path on the remoting port: the same sends, answers and errors as on gRPC."""

from __future__ import annotations

import asyncio

import pytest

from ferrymq.client import Admin, FerryError, Message, Producer, PullConsumer
from ferrymq.client.routes import Endpoints
from ferrymq.client.security import ClientSecurity

TOO_LARGE = 4 * 1024 * 1024 + 1  # one byte over the node's default body limit


@pytest.fixture(scope="module")
def topic(address) -> str:
    with Admin(address) as admin:
        admin.create_topic("sdk-remoting", queue_count=2)
        admin.create_group("sdk-remoting-readers")
    return "sdk-remoting"


def remoting_peers(producer: Producer) -> set[str]:
    """The remoting addresses the producer's blocking channels are connected to."""
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


def test_a_client_with_credentials_or_tls_stays_on_grpc():
    signed = Endpoints("127.0.0.1:1", 1.0, ClientSecurity(access_key="a", secret_key="b"))
    tls = Endpoints("127.0.0.1:1", 1.0, ClientSecurity(tls_ca="system"))
    plain = Endpoints("127.0.0.1:1", 1.0, ClientSecurity())
    assert not signed.uses_remoting and not tls.uses_remoting and plain.uses_remoting
    with pytest.raises(ValueError):
        Endpoints("127.0.0.1:1", 1.0, ClientSecurity(), transport="carrier-pigeon")


def test_a_dead_remoting_port_is_a_retriable_transport_error(module_node, topic):
    """The node's remoting port gone (the client was told a wrong one): each send fails as
    a transport failure, retried and then raised, as a dead gRPC port is."""
    with Producer(module_node.address, max_attempts=2) as producer:
        producer.send(Message(topic, b"warm"))
        endpoints = producer.endpoints
        endpoints._remoting_addresses[module_node.address] = "127.0.0.1:1"
        with pytest.raises(FerryError) as failed:
            producer.send(Message(topic, b"lost"))
    assert failed.value.code_name == "UNAVAILABLE" and failed.value.retriable
