"""The SDK's remoting door with credentials and TLS: its requests signed (RocketMQ ACL 1.0)
and decided by the gRPC port's rules, its connections TLS, and every refusal raised as the
gRPC door raises it."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from ferrymq.client import Admin, ClientSecurity, FerryError, Message, Producer, PullConsumer
from ferrymq.client.admin import AclRule
from ferrymq.client.remoting_channel import answer_body
from ferrymq.client.routes import Endpoints
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import FerryRequestCode, ResponseCode
from ferrymq.protocol.ferrymq import data_pb2 as data
from tests.support.auth import APP, AUTH_TOML, ROOT, grant_app
from tests.support.nodes import start_node
from tests.support.tls_certs import make_pki


def remoting_sockets(client: Producer | PullConsumer) -> list:
    """The connected sockets of the client's blocking remoting channels."""
    return [c._socket for c in client.endpoints._channels.values() if c._socket is not None]


def peer(sock) -> str:
    host, port = sock.getpeername()[:2]
    return f"{host}:{port}"


def poll_until(consumer: PullConsumer, count: int) -> list:
    got = []
    for _ in range(50):
        got += consumer.poll(wait_s=0.2)
        if len(got) >= count:
            break
    return got


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """Auth on; ``app`` may publish to and read ``ledger`` with the group ``clerks``."""
    node = start_node(str(tmp_path_factory.mktemp("sdk-acl") / "node"), AUTH_TOML)
    try:
        grant_app(
            node.address,
            ["ledger", "vault"],
            ["clerks"],
            [
                AclRule("ALLOW", "PUBLISH", "TOPIC", "ledger"),
                AclRule("ALLOW", "SUBSCRIBE", "TOPIC", "ledger"),
                AclRule("ALLOW", "SUBSCRIBE", "GROUP", "clerks"),
            ],
        )
        yield node
    finally:
        node.sigterm()


def stored(node, topic: str) -> int:
    with Admin(node.address, security=ROOT) as admin:
        _, (queue,) = admin.describe_topic(topic)
        return queue.max_offset


def test_a_client_with_credentials_sends_and_fetches_on_the_remoting_port(guarded):
    with Producer(guarded.address, security=APP) as producer:
        sent = producer.send(Message("ledger", b"signed"))
        assert [peer(s) for s in remoting_sockets(producer)] == [guarded.remoting]

        async def coalesced():
            sends = (producer.send_async(Message("ledger", b"a%d" % i)) for i in range(5))
            receipts = await asyncio.gather(*sends)
            [channel] = producer.loop_state()._channels.values()
            return receipts, channel._protocol.transport.get_extra_info("peername")

        receipts, (host, port) = asyncio.run(coalesced())
        assert f"{host}:{port}" == guarded.remoting
    ids = {sent.message_id, *(r.message_id for r in receipts)}
    with PullConsumer(guarded.address, "clerks", start="beginning", security=APP) as consumer:
        consumer.assign("ledger", [0])
        got = poll_until(consumer, 6)
        assert [peer(s) for s in remoting_sockets(consumer)] == [guarded.remoting]
    assert {m.message_id for m in got} == ids


def refusal(action) -> tuple[str, bool, str]:
    with pytest.raises(FerryError) as refused:
        action()
    return refused.value.code_name, refused.value.retriable, refused.value.detail


def send_with(node, security: ClientSecurity, topic: str, transport: str):
    def send() -> None:
        with Producer(node.address, security=security, transport=transport) as producer:
            producer.send(Message(topic, b"refused"))
            raise AssertionError("sent")

    return send


def fetch_with(node, topic: str, transport: str):
    """A fetch as PullConsumer makes it, on one door (a PullConsumer asks offsets on gRPC
    first, which would refuse before the fetch)."""

    def fetch() -> None:
        endpoints = Endpoints(node.address, 10.0, APP, transport)
        try:
            endpoints.route("ledger")  # allowed: learns the remoting address
            request = data.FetchRequest(group="clerks", topic=topic, max_messages=1)
            channel = endpoints.channel(node.address)
            if channel is not None:
                channel.call(FerryRequestCode.FERRY_FETCH, request.SerializeToString())
            else:
                access = endpoints.access
                access.call(access.data.Fetch, request)
        finally:
            endpoints.close()
        raise AssertionError("fetched")

    return fetch


def test_refusals_are_the_same_on_both_doors(guarded):
    """A wrong secret, an unknown key, a missing permission: the same FerryError on either
    door, not retried, and nothing stored."""
    before = {topic: stored(guarded, topic) for topic in ("ledger", "vault")}
    wrong_secret = ClientSecurity(APP.access_key, "not-the-secret")
    stranger = ClientSecurity("stranger", "stranger-secret-key")
    cases = {
        "wrong secret": (lambda t: send_with(guarded, wrong_secret, "ledger", t), "UNAUTHORIZED"),
        "unknown key": (lambda t: send_with(guarded, stranger, "ledger", t), "UNAUTHORIZED"),
        "no publish": (lambda t: send_with(guarded, APP, "vault", t), "PERMISSION_DENIED"),
        "no subscribe": (lambda t: fetch_with(guarded, "vault", t), "PERMISSION_DENIED"),
    }
    for case, (action, expected) in cases.items():
        on_remoting = refusal(action("remoting"))
        on_grpc = refusal(action("grpc"))
        assert on_remoting[:2] == on_grpc[:2] == (expected, False), (case, on_remoting, on_grpc)
    with Producer(guarded.address, security=APP) as producer:  # refused on the remoting door
        code_name, _, detail = refusal(lambda: producer.send(Message("vault", b"refused")))
        assert [peer(s) for s in remoting_sockets(producer)] == [guarded.remoting]
    assert code_name == "PERMISSION_DENIED"
    assert detail.endswith("FORBIDDEN: user app has no publish permission on topic vault")
    assert {topic: stored(guarded, topic) for topic in before} == before


def test_a_client_with_tls_reaches_the_remoting_port_over_tls(tmp_path):
    pki = make_pki(tmp_path / "pki")
    node = start_node(
        str(tmp_path / "node"),
        f'[security]\ntls_cert = "{pki.server_cert}"\ntls_key = "{pki.server_key}"\n'
        f'tls_client_ca = "{pki.ca}"\n',
    )
    security = ClientSecurity(tls_ca=pki.ca, tls_cert=pki.client_cert, tls_key=pki.client_key)
    try:
        with Admin(node.address, security=security) as admin:
            admin.create_topic("sealed", 1)
            admin.create_group("sealed-readers")
        with Producer(node.address, security=security) as producer:
            sent = producer.send(Message("sealed", b"over tls"))
            [sock] = remoting_sockets(producer)
            assert isinstance(sock, ssl.SSLSocket) and peer(sock) == node.remoting

            async def coalesced():
                receipt = await producer.send_async(Message("sealed", b"async over tls"))
                [channel] = producer.loop_state()._channels.values()
                transport = channel._protocol.transport
                return receipt, transport.get_extra_info("ssl_object") is not None

            receipt, async_tls = asyncio.run(coalesced())
            assert async_tls
        with PullConsumer(
            node.address, "sealed-readers", start="beginning", security=security
        ) as consumer:
            consumer.assign("sealed", [0])
            got = poll_until(consumer, 2)
            [sock] = remoting_sockets(consumer)
            assert isinstance(sock, ssl.SSLSocket)
        assert {m.message_id for m in got} == {sent.message_id, receipt.message_id}
        # A CA that did not sign the node's certificate: the handshake fails, as on gRPC.
        other = make_pki(tmp_path / "other")
        stranger = ClientSecurity(tls_ca=other.ca, tls_cert=pki.client_cert, tls_key=pki.client_key)
        with (
            Producer(node.address, security=stranger, max_attempts=1, timeout_s=5) as producer,
            pytest.raises(FerryError) as failed,
        ):
            producer.send(Message("sealed", b"unverified"))
        assert failed.value.code_name == "UNAVAILABLE"
    finally:
        node.sigterm()


def test_a_remoting_refusal_is_told_apart_by_its_remark():
    """NO_PERMISSION's remark says which refusal it is, as gRPC's status code does."""
    for remark, code_name in (
        ("UNAUTHENTICATED: the signature does not match", "UNAUTHENTICATED"),
        ("FORBIDDEN: user app has no publish permission on topic vault", "PERMISSION_DENIED"),
    ):
        answer = RemotingCommand(ResponseCode.NO_PERMISSION, opaque=1, flag=1, remark=remark)
        with pytest.raises(FerryError) as refused:
            answer_body("127.0.0.1:1", answer)
        assert refused.value.code_name == code_name and not refused.value.retriable
