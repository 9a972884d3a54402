"""The remoting port of a node with TLS (the gRPC port's certificate and client CA) and of
a node with authentication on: RocketMQ ACL 1.0 signatures, decided as on the gRPC port."""

from __future__ import annotations

import json
import ssl

import pytest

from ferrymq.client import Admin, ClientSecurity
from ferrymq.client.admin import AclRule
from ferrymq.codec.acl_signature import sign_request
from ferrymq.codec.message_id import parse_offset_message_id
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.launcher.polling import until
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from tests.support.auth import APP, AUTH_TOML, ROOT, grant_app, signed
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient, json_of, send_v2
from tests.support.rpc import stubs
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


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A node with auth on; ``app`` may publish to and subscribe to ``orders`` with the
    group ``readers``, nothing on ``payments`` or with ``others``."""
    node = start_node(str(tmp_path_factory.mktemp("acl") / "node"), AUTH_TOML)
    try:
        grant_app(
            node.address,
            ["orders", "payments"],
            ["readers", "others"],
            [
                AclRule("ALLOW", "PUBLISH", "TOPIC", "orders"),
                AclRule("ALLOW", "SUBSCRIBE", "TOPIC", "orders"),
                AclRule("ALLOW", "SUBSCRIBE", "GROUP", "readers"),
            ],
        )
        yield node
    finally:
        node.sigterm()


def stored(node, topic: str) -> int:
    with Admin(node.address, security=ROOT) as admin:
        _, (queue,) = admin.describe_topic(topic)
        return queue.max_offset


def pull_fields(group: str, topic: str = "orders") -> dict[str, str]:
    return {
        "consumerGroup": group,
        "topic": topic,
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "4",  # the subscription travels with the pull
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subscription": "*",
        "subVersion": "0",
        "expressionType": "TAG",
    }


def test_acl_1_signed_requests_are_served_with_the_users_permissions(guarded):
    before = stored(guarded, "orders")
    with RemotingClient(guarded.remoting, security=APP) as client:
        route = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"})
        assert route.code == ResponseCode.SUCCESS
        assert send_v2(client, "orders", b"signed").code == ResponseCode.SUCCESS
        pulled = client.call(RequestCode.PULL_MESSAGE, pull_fields("readers"))
        assert pulled.code == ResponseCode.SUCCESS and b"signed" in pulled.body
        # The Java client signs _UNIQUE_KEY_QUERY, RocketMQ's broker leaves it out: both pass.
        fields = {"topic": "orders", "queueId": "0", "_UNIQUE_KEY_QUERY": "true"}
        assert client.call(RequestCode.GET_MAX_OFFSET, fields).code == ResponseCode.SUCCESS
        without = sign_request(
            {k: v for k, v in fields.items() if k != "_UNIQUE_KEY_QUERY"},
            b"",
            APP.access_key,
            APP.secret_key,
        )
        client.security = None
        with_field = {**without, "_UNIQUE_KEY_QUERY": "true"}
        assert client.call(RequestCode.GET_MAX_OFFSET, with_field).code == ResponseCode.SUCCESS
    with RemotingClient(guarded.remoting, security=ROOT) as client:  # the admin may all
        listing = client.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        assert listing.code == ResponseCode.SUCCESS
    assert stored(guarded, "orders") == before + 1


def test_unsigned_badly_signed_unknown_and_unpermitted_requests_are_refused_and_change_nothing(
    guarded,
):
    before = {topic: stored(guarded, topic) for topic in ("orders", "payments")}
    wrong_secret = ClientSecurity(APP.access_key, "not-the-secret")
    stranger = ClientSecurity("stranger", "stranger-secret-key")
    refusals = [
        (None, "carries no AccessKey and Signature"),
        (wrong_secret, "the signature does not match"),
        (stranger, "the signature does not match"),  # unknown keys are not told apart
    ]
    for security, remark in refusals:
        with RemotingClient(guarded.remoting, security=security) as client:
            for answer in (
                send_v2(client, "orders", b"refused"),
                client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"}),
                client.call(RequestCode.PULL_MESSAGE, pull_fields("readers")),
            ):
                assert answer.code == ResponseCode.NO_PERMISSION, answer
                assert remark in answer.remark and "UNAUTHENTICATED" in answer.remark
    with RemotingClient(guarded.remoting, security=APP) as client:
        answer = send_v2(client, "payments", b"refused")
        assert answer.code == ResponseCode.NO_PERMISSION
        assert answer.remark == "FORBIDDEN: user app has no publish permission on topic payments"
        answer = client.call(RequestCode.PULL_MESSAGE, pull_fields("others"))
        assert answer.remark == "FORBIDDEN: user app has no subscribe permission on group others"
        answer = client.call(RequestCode.PULL_MESSAGE, pull_fields("readers", "payments"))
        assert answer.remark == "FORBIDDEN: user app has no subscribe permission on topic payments"
        heartbeat = {
            "clientID": "c1",
            "consumerDataSet": [{"groupName": "others", "subscriptionDataSet": []}],
        }
        answer = client.call(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode())
        assert answer.remark == "FORBIDDEN: user app has no subscribe permission on group others"
        answer = client.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        assert answer.code == ResponseCode.NO_PERMISSION
        assert answer.remark == (
            "FORBIDDEN: user app: remoting:GET_ALL_TOPIC_LIST_FROM_NAMESERVER needs admin rights"
        )
        # A body changed after signing: the signature covers it.
        fields = sign_request({"topic": "orders"}, b"", APP.access_key, APP.secret_key)
        client.security = None
        tampered = client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, fields, body=b"extra")
        assert "the signature does not match" in tampered.remark
    with Admin(guarded.address, security=ROOT) as admin:
        assert admin.group_members("others") == []  # the refused heartbeat joined nothing
    assert {topic: stored(guarded, topic) for topic in before} == before


def test_client_ids_belong_to_the_access_key_on_both_ports(guarded):
    """A 4.x consumer's client id is owned by its verified access key, as a gRPC caller's
    is: the same user may renew it through either port, another user may not."""
    with Admin(guarded.address, security=ROOT) as admin:
        admin.create_user("colleague", "colleague-secret-key")
        admin.grant("colleague", AclRule("ALLOW", "SUBSCRIBE", "GROUP", "readers"))
    colleague = ClientSecurity("colleague", "colleague-secret-key")

    def remoting_heartbeat(client: RemotingClient, client_id: str):
        body = {
            "clientID": client_id,
            "consumerDataSet": [{"groupName": "readers", "subscriptionDataSet": []}],
        }
        return client.call(RequestCode.HEART_BEAT, body=json.dumps(body).encode())

    channel, messaging, _ = stubs(guarded.address)
    # The member lives while its connection does (a closed one takes it along).
    with (
        RemotingClient(guarded.remoting, security=APP) as app,
        RemotingClient(guarded.remoting, security=colleague) as other,
    ):
        try:
            assert remoting_heartbeat(app, "shared-id").code == ResponseCode.SUCCESS
            request = rpc.HeartbeatRequest(
                group=pb.Resource(name="readers"), client_type=pb.PUSH_CONSUMER
            )
            renewed = messaging.Heartbeat(request, metadata=signed(APP, "shared-id")).status
            assert renewed.code == pb.OK, renewed
            taken = messaging.Heartbeat(request, metadata=signed(colleague, "shared-id")).status
            assert taken.code == pb.FORBIDDEN and "another identity" in taken.message
            refused = remoting_heartbeat(other, "shared-id")
            assert refused.code == ResponseCode.NO_PERMISSION
            assert "another identity" in refused.remark
        finally:
            channel.close()


def batch_ack(group: str, topic: str) -> bytes:
    ack = {"c": group, "t": topic, "r": "0", "so": 0, "q": 0, "rq": 1, "pt": 1, "it": 1}
    return json.dumps({"brokerName": "group-1", "acks": [ack | {"b": "AQ=="}]}).encode()


def test_a_batch_ack_needs_subscribe_on_each_topic_and_group_and_admin_codes_admin_rights(
    guarded,
):
    with RemotingClient(guarded.remoting, security=APP) as client:
        allowed = client.call(RequestCode.BATCH_ACK_MESSAGE, body=batch_ack("readers", "orders"))
        # Past the access rule: the handler answers (nothing popped, so the offset is stale).
        assert allowed.code == ResponseCode.MESSAGE_ILLEGAL, allowed
        assert json.loads(allowed.body)["results"][0]["offset"] == 0
        refused = client.call(RequestCode.BATCH_ACK_MESSAGE, body=batch_ack("readers", "payments"))
        assert refused.code == ResponseCode.NO_PERMISSION
        assert refused.remark == "FORBIDDEN: user app has no subscribe permission on topic payments"
        refused = client.call(RequestCode.BATCH_ACK_MESSAGE, body=batch_ack("others", "orders"))
        assert refused.remark == "FORBIDDEN: user app has no subscribe permission on group others"
        settings = client.call(RequestCode.GET_BROKER_CONFIG)
        assert settings.code == ResponseCode.NO_PERMISSION
        assert settings.remark.endswith("remoting:GET_BROKER_CONFIG needs admin rights")
    with RemotingClient(guarded.remoting, security=ROOT) as client:
        settings = client.call(RequestCode.GET_BROKER_CONFIG)
        assert settings.code == ResponseCode.SUCCESS
        assert b"aclEnable=true\n" in settings.body
        assert ROOT.secret_key.encode() not in settings.body


def offset_of(sent) -> int:
    """The commit log offset in a 4.x send's offset message id."""
    return parse_offset_message_id(sent.ext_fields["msgId"])[1]


def end_transaction(client: RemotingClient, sent, kind: int):
    return client.call(
        RequestCode.END_TRANSACTION,
        {
            "producerGroup": "pg",
            "tranStateTableOffset": sent.ext_fields["queueOffset"],
            "commitLogOffset": str(offset_of(sent)),
            "commitOrRollback": str(kind),
            "fromTransactionCheck": "false",
            "msgId": "unused",
            "transactionId": sent.ext_fields["transactionId"],
        },
    )


def test_end_transaction_needs_publish_on_the_topic_of_the_half_it_ends(guarded):
    """A non-admin producer with PUBLISH on its topic commits; a user without it is
    refused and the half stays pending, so its producer still commits it."""
    with Admin(guarded.address, security=ROOT) as admin:
        admin.create_topic("escrow", 1, message_type="TRANSACTION")
        admin.grant(APP.access_key, AclRule("ALLOW", "PUBLISH", "TOPIC", "escrow"))
        admin.create_user("bystander", "bystander-secret-key")
        admin.grant("bystander", AclRule("ALLOW", "SUBSCRIBE", "TOPIC", "escrow"))
    bystander = ClientSecurity("bystander", "bystander-secret-key")
    with RemotingClient(guarded.remoting, security=APP) as producer:
        first = send_v2(producer, "escrow", b"first", 0, TRAN_MSG="true", PGROUP="pg")
        second = send_v2(producer, "escrow", b"second", 0, TRAN_MSG="true", PGROUP="pg")
        assert first.code == second.code == ResponseCode.SUCCESS
        assert end_transaction(producer, first, 8).code == ResponseCode.SUCCESS
        until(lambda: stored(guarded, "escrow") == 1, 10, "the committed half")
        with RemotingClient(guarded.remoting, security=bystander) as other:
            refused = end_transaction(other, second, 8)
            assert refused.code == ResponseCode.NO_PERMISSION
            assert refused.remark == (
                "FORBIDDEN: user bystander has no publish permission on topic escrow"
            )
            assert end_transaction(other, second, 12).code == ResponseCode.NO_PERMISSION
        assert stored(guarded, "escrow") == 1  # neither committed nor rolled back
        assert end_transaction(producer, second, 8).code == ResponseCode.SUCCESS
    until(lambda: stored(guarded, "escrow") == 2, 10, "the half left pending, committed")


def test_view_message_by_id_needs_subscribe_on_the_topic_of_the_record(guarded):
    with RemotingClient(guarded.remoting, security=ROOT) as root:
        elsewhere = send_v2(root, "payments", b"not yours")
    with RemotingClient(guarded.remoting, security=APP) as client:
        mine = send_v2(client, "orders", b"yours")
        viewed = client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset_of(mine))})
        assert viewed.code == ResponseCode.SUCCESS and b"yours" in viewed.body
        # Without a topic, the record's own topic decides.
        refused = client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset_of(elsewhere))})
        assert refused.code == ResponseCode.NO_PERMISSION
        assert refused.remark == "FORBIDDEN: user app has no subscribe permission on topic payments"
        # Naming a topic it may read does not open another topic's record: it is not there,
        # as for Admin QueryMessageById (one rule: node/services/queries.py).
        fields = {"offset": str(offset_of(elsewhere)), "topic": "orders"}
        hidden = client.call(RequestCode.VIEW_MESSAGE_BY_ID, fields)
        assert hidden.code == ResponseCode.SYSTEM_ERROR and "can not find" in hidden.remark
        missing = client.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(1 << 40)})
        assert missing.code == ResponseCode.SYSTEM_ERROR and "can not find" in missing.remark


def test_check_client_config_needs_subscribe_on_the_group(guarded):
    def check(client: RemotingClient, group: str):
        body = {
            "clientId": "c1",
            "group": group,
            "subscriptionData": {"topic": "orders", "subString": "a", "expressionType": "TAG"},
        }
        return client.call(RequestCode.CHECK_CLIENT_CONFIG, body=json.dumps(body).encode())

    with RemotingClient(guarded.remoting, security=APP) as client:
        assert check(client, "readers").code == ResponseCode.SUCCESS
        refused = check(client, "others")
        assert refused.code == ResponseCode.NO_PERMISSION
        assert refused.remark == "FORBIDDEN: user app has no subscribe permission on group others"
