"""The remoting port of a node with TLS (the gRPC port's certificate and client CA) and of
a node with authentication on (every request refused: no ACL 1.0 yet)."""

from __future__ import annotations

import ssl

import pytest

from ferrymq.client import Admin, ClientSecurity
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from tests.support.auth import AUTH_TOML, ROOT
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient, json_of, send_v2
from tests.support.tls_certs import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def client_context(pki, with_certificate: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=pki.ca)
    if with_certificate:
        context.load_cert_chain(pki.client_cert, pki.client_key)
    return context


def test_the_remoting_port_speaks_tls_with_the_nodes_certificate_and_client_ca(tmp_path, pki):
    node = start_node(
        str(tmp_path / "tls"),
        f'[security]\ntls_cert = "{pki.server_cert}"\ntls_key = "{pki.server_key}"\n'
        f'tls_client_ca = "{pki.ca}"\n',
    )
    try:
        security = ClientSecurity(tls_ca=pki.ca, tls_cert=pki.client_cert, tls_key=pki.client_key)
        with Admin(node.address, security=security) as admin:
            admin.create_topic("secure", 2)
        with RemotingClient(node.remoting, ssl_context=client_context(pki, True)) as client:
            answer = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "secure"})
            assert answer.code == ResponseCode.SUCCESS
            assert json_of(answer)["brokerDatas"][0]["brokerAddrs"] == {"0": node.remoting}
            assert send_v2(client, "secure", b"over tls").code == ResponseCode.SUCCESS
        # Without a client certificate (mutual TLS), or in clear text: no answer.
        without_certificate = client_context(pki, False)
        with (
            pytest.raises(OSError),  # ssl.SSLError, ConnectionError and timeouts are OSErrors
            RemotingClient(node.remoting, ssl_context=without_certificate) as client,
        ):
            client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "secure"})
        with pytest.raises(OSError), RemotingClient(node.remoting, timeout_s=5) as client:
            client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "secure"})
    finally:
        node.sigterm()


def test_with_authentication_on_every_remoting_request_is_refused(tmp_path):
    node = start_node(str(tmp_path / "auth"), AUTH_TOML)
    try:
        with Admin(node.address, security=ROOT) as admin:
            admin.create_topic("guarded", 1)
        with RemotingClient(node.remoting) as client:
            for code, fields in [
                (RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "guarded"}),
                (RequestCode.GET_MAX_OFFSET, {"topic": "guarded", "queueId": "0"}),
            ]:
                answer = client.call(code, fields)
                assert answer.code == ResponseCode.NO_PERMISSION and "ACL 1.0" in answer.remark
            assert send_v2(client, "guarded", b"x").code == ResponseCode.NO_PERMISSION
        with Admin(node.address, security=ROOT) as admin:
            _, (queue,) = admin.describe_topic("guarded")
            assert queue.max_offset == 0  # nothing was stored
    finally:
        node.sigterm()
