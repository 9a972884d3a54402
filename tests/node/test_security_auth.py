"""Authentication, authorization and TLS end to end: real node processes, the official
RocketMQ 5 Python client in a process of its own, and the ferrymq SDK.

One node runs with auth on and a bootstrap admin (``root``). The user ``app`` may publish
on ``orders`` (not ``payments``) and subscribe to ``orders`` with group ``readers``. Every
refusal is checked twice: what the client sees, and (read back as ``root``) that nothing
was stored or acked."""

from __future__ import annotations

import pytest

from ferrymq.client import Admin, ClientSecurity, FerryError, Producer
from ferrymq.client.admin import AclRule
from ferrymq.client.messages import Message
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from tests.support.auth import APP, AUTH_TOML, ROOT, signed
from tests.support.nodes import start_node
from tests.support.official_client import run_official_at
from tests.support.rpc import stubs
from tests.support.tls_certs import make_pki


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    directory = tmp_path_factory.mktemp("secured")
    node = start_node(str(directory / "node"), AUTH_TOML)
    try:
        with Admin(node.address, security=ROOT) as admin:
            admin.create_topic("orders", 2)
            admin.create_topic("payments", 2)
            admin.create_group("readers")
            admin.create_group("others")
            admin.create_topic("acked", 1)
            admin.create_group("ackers")
            admin.create_user("app", "app-secret-key")
            for rule in (
                AclRule("ALLOW", "PUBLISH", "TOPIC", "orders"),
                AclRule("ALLOW", "SUBSCRIBE", "TOPIC", "orders"),
                AclRule("ALLOW", "SUBSCRIBE", "GROUP", "readers"),
            ):
                admin.grant("app", rule)
        yield node, directory
    finally:
        node.sigterm()


def test_auth_without_tls_is_warned_about_at_start(secured, tmp_path, pki):
    _, directory = secured
    with open(directory / "node.log", encoding="utf-8") as f:
        assert "security.auth is on and the client ports take plaintext" in f.read()
    tls = f'tls_cert = "{pki.server_cert}"\ntls_key = "{pki.server_key}"\n'
    node = start_node(str(tmp_path / "tls"), AUTH_TOML + tls)
    node.sigterm()
    with open(tmp_path / "tls.log", encoding="utf-8") as f:
        assert "without TLS" not in f.read()


def stored_count(address: str, topic: str) -> int:
    with Admin(address, security=ROOT) as admin:
        _, queues = admin.describe_topic(topic)
    return sum(q.max_offset for q in queues)


def of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["event"] == kind]


def test_official_producer_is_authorized_per_topic_and_refused_without_valid_credentials(
    secured,
):
    node, directory = secured
    wrong = {"access_key": "app", "secret_key": "not-the-secret"}
    events = run_official_at(
        node.address,
        directory / "home-producer",
        {
            "scenario": "produce",
            "topics": ["orders"],
            "access_key": "app",
            "secret_key": "app-secret-key",
            "signing": {},
            "messages": [
                {"topic": "orders", "body": "ok-1"},
                {"topic": "orders", "body": "ok-2"},
                {"topic": "payments", "body": "forbidden"},
                {"topic": "orders", "body": "wrong-secret", "signing": wrong},
                {"topic": "orders", "body": "no-header", "signing": {"omit_authorization": True}},
                {"topic": "orders", "body": "expired", "signing": {"date_offset_s": -600}},
                {"topic": "orders", "body": "future", "signing": {"date_offset_s": 600}},
            ],
        },
    )
    assert [e["body"] for e in of(events, "sent")] == ["ok-1", "ok-2"]
    failed = {e["body"]: e["type"] for e in of(events, "send_failed")}
    assert failed == {
        "forbidden": "ForbiddenException",
        "wrong-secret": "UnauthorizedException",
        "no-header": "UnauthorizedException",
        "expired": "UnauthorizedException",
        "future": "UnauthorizedException",
    }
    messages = {e["body"]: e["message"] for e in of(events, "send_failed")}
    assert "publish permission on topic payments" in messages["forbidden"]
    assert "beyond the allowed 120 s" in messages["expired"]
    assert "no authorization header" in messages["no-header"]
    assert "app-secret-key" not in str(events)
    # Nothing refused was stored.
    assert stored_count(node.address, "orders") == 2
    assert stored_count(node.address, "payments") == 0


def test_a_fresh_official_client_with_a_wrong_secret_is_refused_from_the_first_call(secured):
    node, directory = secured
    events = run_official_at(
        node.address,
        directory / "home-wrong",
        {
            "scenario": "produce",
            "topics": ["payments"],
            "access_key": "app",
            "secret_key": "guessed-secret",
            "messages": [{"topic": "payments", "body": "never"}],
        },
    )
    # The official client raises a generic exception when a route cannot be fetched and
    # logs the node's status (40100 UNAUTHORIZED and why) in its own log.
    (failed,) = of(events, "send_failed")
    assert failed["message"] == "failed to fetch topic:payments route."
    log = directory / "home-wrong" / "logs" / "rocketmq_python" / "rocketmq_client.log"
    assert "40100, UNAUTHENTICATED: the signature does not match" in log.read_text()
    assert stored_count(node.address, "payments") == 0


def test_official_consumer_needs_subscribe_on_topic_and_group(secured):
    node, directory = secured
    with Producer(node.address, security=APP) as producer:
        for i in range(2):
            producer.send(Message("orders", f"to-read-{i}".encode()))
    stored = stored_count(node.address, "orders")
    events = run_official_at(
        node.address,
        directory / "home-consumer",
        {
            "scenario": "simple",
            "topic": "orders",
            "group": "readers",
            "access_key": "app",
            "secret_key": "app-secret-key",
            "await_s": 2,
            "steps": [
                {"do": "receive_until", "count": stored, "deadline_s": 20, "invisible_s": 60}
            ],
        },
    )
    assert len(of(events, "received")) == stored
    events = run_official_at(
        node.address,
        directory / "home-consumer-2",
        {
            "scenario": "simple",
            "topic": "orders",
            "group": "others",
            "access_key": "app",
            "secret_key": "app-secret-key",
            "await_s": 1,
            "steps": [{"do": "receive_once", "invisible_s": 30}],
        },
    )
    (refused,) = of(events, "receive_failed")
    assert refused["type"] == "ForbiddenException"
    assert "subscribe permission on group others" in refused["message"]
    with Admin(node.address, security=ROOT) as admin:
        readers = admin.group_progress("readers", "orders")
        others = admin.group_progress("others", "orders")
    assert sum(q.in_flight for q in readers) == stored  # received, not acked
    assert sum(q.in_flight for q in others) == 0


def test_acks_signed_with_a_wrong_secret_are_refused_and_ack_nothing(secured):
    node, directory = secured
    with Producer(node.address, security=ROOT) as producer:
        receipt = producer.send(Message("acked", b"ack-me"))
    events = run_official_at(
        node.address,
        directory / "home-acker",
        {
            "scenario": "simple",
            "topic": "acked",
            "group": "ackers",
            "access_key": "root",
            "secret_key": "root-secret-key",
            "signing": {},
            "await_s": 2,
            "steps": [
                {"do": "receive_until", "count": 1, "deadline_s": 20, "invisible_s": 60},
                {"do": "sign_as", "access_key": "root", "secret_key": "not-the-secret"},
                {"do": "ack", "ids": [receipt.message_id]},
            ],
        },
    )
    assert [e["id"] for e in of(events, "received")] == [receipt.message_id]
    (failed,) = of(events, "ack_failed")
    assert failed["type"] == "UnauthorizedException" and not of(events, "acked")
    with Admin(node.address, security=ROOT) as admin:
        progress = admin.group_progress("ackers", "acked")
    assert sum(q.in_flight for q in progress) == 1 and progress[0].consumer_offset == 0


def test_admin_rpcs_need_admin_rights_and_valid_credentials(secured):
    node, _ = secured
    with Admin(node.address, security=APP) as admin:
        with pytest.raises(FerryError) as refused:
            admin.create_topic("mine", 1)
        assert refused.value.code_name == "PERMISSION_DENIED"
        assert "CreateTopic needs admin rights" in refused.value.detail
        with pytest.raises(FerryError) as refused:
            admin.list_users()
        assert refused.value.code_name == "PERMISSION_DENIED"
        topic, _ = admin.describe_topic("orders")  # scoped to a topic it may use
        assert topic.name == "orders"
    with Admin(node.address, security=ClientSecurity("app", "wrong-secret")) as admin:
        with pytest.raises(FerryError) as refused:
            admin.list_topics()
        assert refused.value.code_name == "UNAUTHENTICATED"
    with Admin(node.address, security=ClientSecurity()) as admin:
        with pytest.raises(FerryError) as refused:
            admin.list_topics()
        assert refused.value.code_name == "UNAUTHENTICATED"
    with Admin(node.address, security=ROOT) as admin:
        assert "mine" not in {t.name for t in admin.list_topics()}
        users = {u.access_key: u for u in admin.list_users()}
        assert users["root"].admin and not users["app"].admin
        assert "allow publish topic:orders" in {str(r) for r in users["app"].acl}


def test_only_the_group_s_subscribers_and_the_member_itself_change_its_membership(secured):
    """Issue 25: Heartbeat and NotifyClientTermination needed only credentials, so anyone
    could add fake members of a group (its pull consumers then got no queues) or evict
    one. Now the group's subscribe permission is needed, and a client id belongs to the
    access key that registered it."""
    node, _ = secured
    with Admin(node.address, security=ROOT) as admin:
        admin.create_user("outsider", "outsider-secret-key")
        admin.create_user("colleague", "colleague-secret-key")
        admin.grant("colleague", AclRule("ALLOW", "SUBSCRIBE", "GROUP", "readers"))
    channel, messaging, _ = stubs(node.address)
    group = pb.Resource(name="readers")

    def heartbeat(security: ClientSecurity, client_id: str, name: str = "readers") -> pb.Status:
        request = rpc.HeartbeatRequest(group=pb.Resource(name=name), client_type=pb.PUSH_CONSUMER)
        return messaging.Heartbeat(request, metadata=signed(security, client_id)).status

    def leave(security: ClientSecurity, client_id: str) -> pb.Status:
        request = rpc.NotifyClientTerminationRequest(group=group)
        return messaging.NotifyClientTermination(
            request, metadata=signed(security, client_id)
        ).status

    def members() -> list[str]:
        with Admin(node.address, security=ROOT) as admin:
            return admin.group_members("readers")

    try:
        assert heartbeat(APP, "member-1").code == pb.OK
        outsider = ClientSecurity("outsider", "outsider-secret-key")
        for refused in (heartbeat(outsider, "fake-1"), leave(outsider, "member-1")):
            assert refused.code == pb.FORBIDDEN
            assert "no subscribe permission on group readers" in refused.message
        colleague = ClientSecurity("colleague", "colleague-secret-key")
        for refused in (leave(colleague, "member-1"), heartbeat(colleague, "member-1")):
            assert refused.code == pb.FORBIDDEN and "another identity" in refused.message
        assert members() == ["member-1"]
        assert heartbeat(ROOT, "root-1", name="no such group").code == pb.ILLEGAL_CONSUMER_GROUP
        assert leave(APP, "member-1").code == pb.OK
        assert members() == []
    finally:
        channel.close()


def test_sdk_producer_refusals_store_nothing(secured):
    node, _ = secured
    before = stored_count(node.address, "payments")
    with Producer(node.address, security=APP) as producer:
        with pytest.raises(FerryError) as refused:
            producer.send(Message("payments", b"x"))
        assert refused.value.code_name in ("FORBIDDEN", "PERMISSION_DENIED")
        with pytest.raises(FerryError) as refused:
            producer.send_batch([Message("payments", b"y"), Message("payments", b"z")])
        assert refused.value.code_name in ("FORBIDDEN", "PERMISSION_DENIED")
    assert stored_count(node.address, "payments") == before


def test_cli_manages_users_and_acl_entries_without_printing_secrets(secured, capsys, monkeypatch):
    from ferrymq.cli.main import main

    node, _ = secured
    for name in ("FERRYMQ_ACCESS_KEY", "FERRYMQ_SECRET_KEY"):
        monkeypatch.setenv(name, "")  # restored after the test whatever main() sets
    monkeypatch.setenv("NEW_USER_SECRET", "cli-user-secret")
    base = ["--server", node.address, "--access-key", "root", "--secret-key", "root-secret-key"]
    assert main(["user", "create", "cli-user", "--secret-key-env", "NEW_USER_SECRET", *base]) == 0
    assert main(["acl", "grant", "cli-user", "publish", "--topic", "orders-*", *base]) == 0
    assert (
        main(["acl", "grant", "cli-user", "publish", "--topic", "orders-x", "--deny", *base]) == 0
    )
    assert main(["acl", "list", "cli-user", *base]) == 0
    assert main(["user", "list", *base]) == 0
    out = capsys.readouterr().out
    assert "allow publish topic:orders-*" in out and "deny publish topic:orders-x" in out
    assert "cli-user-secret" not in out and "root-secret-key" not in out
    assert main(["acl", "revoke", "cli-user", "publish", "--topic", "orders-*", *base]) == 0
    assert main(["user", "delete", "cli-user", *base]) == 0
    capsys.readouterr()
    monkeypatch.setenv("FERRYMQ_SECRET_KEY", "wrong")
    assert main(["user", "list", "--server", node.address, "--access-key", "root"]) == 1
    assert "UNAUTHENTICATED" in capsys.readouterr().err


def test_user_update_keeps_the_admin_flag_unless_told(secured, monkeypatch):
    """A new secret key given without --admin once silently took an admin's rights away."""
    from ferrymq.cli.main import main

    node, _ = secured
    for name in ("FERRYMQ_ACCESS_KEY", "FERRYMQ_SECRET_KEY"):
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("OPERATOR_SECRET", "operator-secret-1")
    base = ["--server", node.address, "--access-key", "root", "--secret-key", "root-secret-key"]
    update = ["user", "update", "operator", "--secret-key-env", "OPERATOR_SECRET", *base]
    assert main(["user", "create", "operator", "--admin", *update[3:]]) == 0
    monkeypatch.setenv("OPERATOR_SECRET", "operator-secret-2")
    assert main(update) == 0

    def admin_flag() -> bool:
        with Admin(node.address, security=ROOT) as admin:
            return {u.access_key: u.admin for u in admin.list_users()}["operator"]

    assert admin_flag()
    with Admin(node.address, security=ClientSecurity("operator", "operator-secret-2")) as admin:
        admin.list_users()  # the new secret works, with the rights kept
    assert main([*update, "--no-admin"]) == 0 and not admin_flag()
    assert main(update) == 0 and not admin_flag()
    assert main([*update, "--admin"]) == 0 and admin_flag()
    assert main(["user", "delete", "operator", *base]) == 0


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_tls_official_client_and_sdk_with_a_custom_ca(tmp_path, pki):
    node = start_node(
        str(tmp_path / "tls-node"),
        AUTH_TOML + f'tls_cert = "{pki.server_cert}"\ntls_key = "{pki.server_key}"\n',
    )
    try:
        tls_root = ClientSecurity("root", "root-secret-key", tls_ca=pki.ca)
        with Admin(node.address, security=tls_root) as admin:
            admin.create_topic("secure", 1)
        with Admin(node.address, security=ROOT) as plaintext, pytest.raises(FerryError):
            plaintext.list_topics()  # no TLS: the handshake fails
        events = run_official_at(
            node.address,
            tmp_path / "home-tls",
            {
                "scenario": "produce",
                "topics": ["secure"],
                "tls": True,
                "access_key": "root",
                "secret_key": "root-secret-key",
                "messages": [{"topic": "secure", "body": "over-tls"}],
            },
            env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": pki.ca},
        )
        assert [e["body"] for e in of(events, "sent")] == ["over-tls"]
        with Admin(node.address, security=tls_root) as admin:
            _, queues = admin.describe_topic("secure")
        assert sum(q.max_offset for q in queues) == 1
    finally:
        node.sigterm()


def test_mutual_tls_refuses_clients_without_a_certificate(tmp_path, pki):
    node = start_node(
        str(tmp_path / "mtls-node"),
        f'[security]\ntls_cert = "{pki.server_cert}"\ntls_key = "{pki.server_key}"\n'
        f'tls_client_ca = "{pki.ca}"\n',
    )
    try:
        with_cert = ClientSecurity(tls_ca=pki.ca, tls_cert=pki.client_cert, tls_key=pki.client_key)
        with Admin(node.address, security=with_cert) as admin:
            admin.create_topic("mutual", 1)
        with Producer(node.address, security=with_cert) as producer:
            producer.send(Message("mutual", b"both-ways"))
        without_cert = ClientSecurity(tls_ca=pki.ca)
        with (
            Admin(node.address, security=without_cert, timeout_s=3) as admin,
            pytest.raises(FerryError) as refused,
        ):
            admin.list_topics()
        assert refused.value.code_name == "UNAVAILABLE"
    finally:
        node.sigterm()
