"""The official Java 4.x client (rocketmq-client 4.9.8, ``java-remoting`` driver) against
a node's remoting port with RocketMQ ACL 1.0 (``AclClientRPCHook`` of rocketmq-acl) and
with TLS (RocketMQ's ``tls.enable`` system property), in a process of its own.

The user ``app`` may publish to and subscribe to ``orders`` with the group ``readers``;
refusals are checked in what the client raises and in what the node stored."""

from __future__ import annotations

import pytest

from ferrymq.client import Admin, ClientSecurity
from ferrymq.client.admin import AclRule
from ferrymq.launcher.polling import until
from tests.support import clients
from tests.support.auth import APP, AUTH_TOML, ROOT
from tests.support.nodes import start_node
from tests.support.tls_certs import make_pki

pytestmark = pytest.mark.timeout(clients.INSTALL_TIMEOUT_S + 300)


@pytest.fixture(scope="module")
def java():
    return clients.required("java-remoting")


def stored(node, topic: str) -> int:
    with Admin(node.address, security=ROOT) as admin:
        _, queues = admin.describe_topic(topic)
        return sum(queue.max_offset for queue in queues)


def messages(topic: str, *bodies: str) -> list[dict]:
    return [{"topic": topic, "body": body, "mode": "sync"} for body in bodies]


def test_java_4x_client_signs_with_acl_1_and_gets_only_what_its_user_may(java, tmp_path):
    node = start_node(str(tmp_path / "node"), AUTH_TOML)
    try:
        with Admin(node.address, security=ROOT) as admin:
            admin.create_topic("orders", 2)
            admin.create_topic("payments", 2)
            admin.create_group("readers")
            admin.create_user(APP.access_key, APP.secret_key)
            for rule in (
                AclRule("ALLOW", "PUBLISH", "TOPIC", "orders"),
                AclRule("ALLOW", "SUBSCRIBE", "TOPIC", "orders"),
                AclRule("ALLOW", "SUBSCRIBE", "GROUP", "readers"),
            ):
                admin.grant(APP.access_key, rule)
        acl = {"access_key": APP.access_key, "secret_key": APP.secret_key}
        run = clients.run(
            java,
            {
                "namesrv": node.remoting,
                "acl": acl,
                "steps": [
                    {"do": "produce", "group": "p", "messages": messages("orders", "o1", "o2")},
                    {"do": "produce", "group": "p", "messages": messages("payments", "p1")},
                    {
                        "do": "push",
                        "group": "readers",
                        "topic": "orders",
                        "expression": "*",
                        "expect": ["o1", "o2"],
                        "deadline_s": 60,
                    },
                ],
            },
            tmp_path / "java-app",
            timeout_s=180,
        )
        assert sorted(e["body"] for e in run.of("sent")) == ["o1", "o2"], run.explain()
        (refused,) = run.of("send_failed")
        assert refused["body"] == "p1", run.explain()
        (cause,) = refused["causes"]  # the broker's code and remark, as the client raises them
        assert "CODE: 16" in cause, run.explain()
        assert "FORBIDDEN: user app has no publish permission on topic payments" in cause
        assert {e["body"] for e in run.of("consumed")} >= {"o1", "o2"}, run.explain()
        # A client with a wrong secret: every request refused, nothing stored.
        wrong = clients.run(
            java,
            {
                "namesrv": node.remoting,
                "acl": {"access_key": APP.access_key, "secret_key": "wrong-secret"},
                "steps": [{"do": "produce", "group": "p", "messages": messages("orders", "x")}],
            },
            tmp_path / "java-wrong",
            timeout_s=120,
        )
        assert not wrong.of("sent") and wrong.of("send_failed"), wrong.explain()
        # Its first request, the route, is refused: the client knows no broker to send to.
        assert "No route info of this topic: orders" in wrong.of("send_failed")[0]["message"]
        assert stored(node, "orders") == 2 and stored(node, "payments") == 0
    finally:
        node.sigterm()


def test_java_4x_client_with_tls_enable_sends_and_consumes_over_tls(java, tmp_path):
    pki = make_pki(tmp_path / "pki")
    node = start_node(
        str(tmp_path / "node"),
        f'[security]\ntls_cert = "{pki.server_cert}"\ntls_key = "{pki.server_key}"\n',
    )
    try:
        with Admin(node.address, security=ClientSecurity(tls_ca=pki.ca)) as admin:
            admin.create_topic("secure", 2)
            admin.create_group("secure-readers")
        spec = {
            "namesrv": node.remoting,
            "steps": [
                {"do": "produce", "group": "p", "messages": messages("secure", "s1", "s2")},
                {
                    "do": "push",
                    "group": "secure-readers",
                    "topic": "secure",
                    "expression": "*",
                    "expect": ["s1", "s2"],
                    "deadline_s": 60,
                },
            ],
        }
        # tls.test.mode.enable (RocketMQ's default) trusts any server certificate.
        tls = {**spec, "system_properties": {"tls.enable": "true"}}
        run = clients.run(java, tls, tmp_path / "java-tls", timeout_s=180)
        assert sorted(e["body"] for e in run.of("sent")) == ["s1", "s2"], run.explain()
        assert {e["body"] for e in run.of("consumed")} >= {"s1", "s2"}, run.explain()
        # The same client in clear text gets no answer from the TLS port: nothing sent.
        plain = {**spec, "steps": spec["steps"][:1]}
        clear = clients.run(java, plain, tmp_path / "java-plain", timeout_s=120)
        assert not clear.of("sent") and clear.of("send_failed"), clear.explain()
    finally:
        node.sigterm()


def test_java_4x_transactional_producer_without_admin_rights_commits(java, tmp_path):
    """END_TRANSACTION needs PUBLISH on the half's topic, not admin rights: ``app``'s
    committed transaction is stored, its rolled-back one is not."""
    node = start_node(str(tmp_path / "node"), AUTH_TOML)
    try:
        with Admin(node.address, security=ROOT) as admin:
            admin.create_topic("escrow", 1, message_type="TRANSACTION")
            admin.create_user(APP.access_key, APP.secret_key)
            admin.grant(APP.access_key, AclRule("ALLOW", "PUBLISH", "TOPIC", "escrow"))
        step = {
            "do": "transaction",
            "group": "tx-app",
            "topic": "escrow",
            "messages": [
                {"body": "kept", "local": "COMMIT_MESSAGE"},
                {"body": "dropped", "local": "ROLLBACK_MESSAGE"},
            ],
        }
        acl = {"access_key": APP.access_key, "secret_key": APP.secret_key}
        spec = {"namesrv": node.remoting, "acl": acl, "steps": [step]}
        run = clients.run(java, spec, tmp_path / "java-tx", timeout_s=180)
        assert sorted(e["body"] for e in run.of("sent")) == ["dropped", "kept"], run.explain()
        until(lambda: stored(node, "escrow") == 1, 30, "the committed transaction")
        with Admin(node.address, security=ROOT) as admin:
            [committed] = admin.query_by_offset("escrow", 0, 0)
        assert committed.body == b"kept"
    finally:
        node.sigterm()
