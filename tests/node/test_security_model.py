"""The security model on its own: ACL decisions (deny wins, wildcards), user commands in
the routing state machine, sealed secrets, signature verification and the access rules of
each RPC. No processes: the end-to-end checks are in test_security_auth.py."""

from __future__ import annotations

import logging
import pickle

import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from node.access import ADMIN, MESSAGING, AccessControl, Refusal
from node.authentication import AuthenticationError, Authenticator, sign, signature_headers
from node.config import ConfigError, parse_node_config
from node.secret_box import SealError, SecretBox
from routing.acl import AclEntry, Action, Effect, ResourceKind, User, is_allowed
from routing.commands import CreateUser, DeleteUser, GrantAcl, RevokeAcl, UpdateUser
from routing.state import RoutingState

TOPIC, GROUP = ResourceKind.TOPIC, ResourceKind.GROUP
PUB, SUB = Action.PUBLISH, Action.SUBSCRIBE


def entry(effect: str, action: Action, kind: ResourceKind, pattern: str) -> AclEntry:
    return AclEntry(Effect(effect), action, kind, pattern)


def test_deny_wins_over_allow_and_nothing_matching_refuses():
    user = User(
        "app",
        b"x",
        acl=(
            entry("ALLOW", PUB, TOPIC, "orders-*"),
            entry("DENY", PUB, TOPIC, "orders-secret"),
            entry("ALLOW", SUB, TOPIC, "*"),
            entry("ALLOW", SUB, GROUP, "app-group"),
        ),
    )
    assert is_allowed(user, PUB, TOPIC, "orders-eu")
    assert not is_allowed(user, PUB, TOPIC, "orders-secret")  # deny wins
    assert not is_allowed(user, PUB, TOPIC, "payments")  # default deny
    assert is_allowed(user, SUB, TOPIC, "payments")
    assert is_allowed(user, SUB, GROUP, "app-group")
    assert not is_allowed(user, SUB, GROUP, "app-group-2")  # exact names are exact
    assert is_allowed(User("root", b"x", admin=True), PUB, TOPIC, "anything")


def test_no_entry_opens_a_system_topic_to_a_user():
    """ "*" once matched %SYS%TRANS_HALF: a user granted every topic read transaction
    halves and parked delayed messages of topics it had no right to."""
    user = User(
        "app",
        b"x",
        acl=(
            entry("ALLOW", SUB, TOPIC, "*"),
            entry("ALLOW", PUB, TOPIC, "%*"),
            entry("ALLOW", SUB, TOPIC, "%SYS%TRANS_HALF"),
        ),
    )
    assert is_allowed(user, SUB, TOPIC, "orders") and is_allowed(user, PUB, TOPIC, "%DLQ%g")
    for name in ("%SYS%TRANS_HALF", "%SYS%TIMER", "%SYS%POP"):
        assert not is_allowed(user, SUB, TOPIC, name) and not is_allowed(user, PUB, TOPIC, name)
    assert is_allowed(User("root", b"x", admin=True), SUB, TOPIC, "%SYS%TRANS_HALF")


def test_user_commands_change_the_state_and_refuse_precisely():
    state = RoutingState()
    assert state.apply(CreateUser("app", b"sealed-1")).ok
    assert state.apply(CreateUser("app", b"sealed-2")).reason == "USER_EXISTS"
    assert state.apply(CreateUser("a b", b"sealed")).reason == "ILLEGAL_USER"
    assert state.apply(CreateUser("app\n", b"sealed")).reason == "ILLEGAL_USER"
    rule = entry("ALLOW", PUB, TOPIC, "orders")
    assert state.apply(GrantAcl("app", rule)).ok
    assert state.apply(GrantAcl("app", rule)).ok  # granting twice changes nothing
    assert state.users["app"].acl == (rule,)
    assert state.apply(GrantAcl("app", entry("ALLOW", PUB, GROUP, "g"))).reason == "ILLEGAL_ACL"
    assert state.apply(GrantAcl("app", entry("ALLOW", SUB, TOPIC, "a*b"))).reason == "ILLEGAL_ACL"
    assert state.apply(GrantAcl("app", entry("ALLOW", SUB, TOPIC, "a\n"))).reason == "ILLEGAL_ACL"
    assert state.apply(GrantAcl("nobody", rule)).reason == "USER_NOT_FOUND"
    assert state.apply(UpdateUser("app", b"", admin=True)).ok
    assert state.users["app"].sealed_secret == b"sealed-1" and state.users["app"].admin
    assert state.apply(UpdateUser("app", b"sealed-3")).ok  # a new secret keeps the rights
    assert state.users["app"].sealed_secret == b"sealed-3" and state.users["app"].admin
    assert state.apply(RevokeAcl("app", rule)).ok and state.users["app"].acl == ()
    assert state.apply(RevokeAcl("app", rule)).reason == "ACL_NOT_FOUND"
    copy = pickle.loads(pickle.dumps(state))  # as pysyncobj snapshots it
    assert copy.users == state.users
    assert state.apply(DeleteUser("app")).ok and not state.users


def test_a_snapshot_from_before_users_loads_with_none():
    state = RoutingState()
    del state.__dict__["users"]
    assert pickle.loads(pickle.dumps(state)).users == {}


def test_secrets_are_sealed_bound_to_their_user_and_cluster_secret():
    box = SecretBox("the-cluster-secret")
    sealed = box.seal("app", "app-secret-key")
    assert b"app-secret-key" not in sealed
    assert box.open("app", sealed) == "app-secret-key"
    with pytest.raises(SealError):
        box.open("other", sealed)  # moved to another user
    with pytest.raises(SealError):
        SecretBox("another-cluster-secret").open("app", sealed)
    assert "sealed" not in repr(CreateUser("app", sealed)) and repr(sealed) not in repr(
        User("app", sealed)
    )


def authenticator(now: float, **users: User) -> Authenticator:
    return Authenticator(users.get, SecretBox("the-cluster-secret"), 300, clock=lambda: now)


def test_signatures_are_verified_within_the_clock_skew_window():
    box = SecretBox("the-cluster-secret")
    now = 1_790_000_000.0
    auth = authenticator(now, app=User("app", box.seal("app", "app-secret-key")))
    good = dict(signature_headers("app", "app-secret-key", now_s=now))
    assert auth.authenticate(good).access_key == "app"
    assert good["authorization"].endswith(sign("app-secret-key", good["x-mq-date-time"]))
    refusals = {
        "no authorization": {"x-mq-date-time": good["x-mq-date-time"]},
        "wrong secret": dict(signature_headers("app", "wrong-secret", now_s=now)),
        "unknown key": dict(signature_headers("ghost", "app-secret-key", now_s=now)),
        "expired": dict(signature_headers("app", "app-secret-key", now_s=now - 301)),
        "from the future": dict(signature_headers("app", "app-secret-key", now_s=now + 301)),
        "no date": {"authorization": good["authorization"]},
        "other scheme": {**good, "authorization": "Basic YXBwOnNlY3JldA=="},
        "garbage signature": {
            **good,
            "authorization": "MQv2-HMAC-SHA1 Credential=app, "
            "SignedHeaders=x-mq-date-time, Signature=\u00e9\u00e9",
        },
    }
    for name, headers in refusals.items():
        with pytest.raises(AuthenticationError) as refused:
            auth.authenticate(headers)
        assert "app-secret-key" not in str(refused.value), name
    # An unknown key and a wrong secret are refused alike (no key enumeration).
    messages = set()
    for name in ("wrong secret", "unknown key"):
        with pytest.raises(AuthenticationError) as refused:
            auth.authenticate(refusals[name])
        messages.add(str(refused.value))
    assert len(messages) == 1


def test_each_rpc_needs_the_permissions_of_the_resources_it_names():
    box = SecretBox("the-cluster-secret")
    now = 1_790_000_000.0
    producer = User(
        "producer",
        box.seal("producer", "secret-of-producer"),
        acl=(entry("ALLOW", PUB, TOPIC, "orders"), entry("ALLOW", SUB, TOPIC, "orders")),
    )
    admin = User("root", box.seal("root", "secret-of-root"), admin=True)
    access = AccessControl(authenticator(now, producer=producer, root=admin))
    as_producer = dict(signature_headers("producer", "secret-of-producer", now_s=now))
    as_root = dict(signature_headers("root", "secret-of-root", now_s=now))

    def send(topic: str) -> rpc.SendMessageRequest:
        return rpc.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=topic))])

    access.check(MESSAGING + "SendMessage", as_producer, send("orders"))
    access.check(MESSAGING + "QueryRoute", as_producer, rpc.QueryRouteRequest())
    access.check(ADMIN + "DescribeTopic", as_producer, api.DescribeTopicRequest(name="orders"))
    receive = rpc.ReceiveMessageRequest(
        group=pb.Resource(name="readers"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="orders")),
    )
    refused = [
        (MESSAGING + "SendMessage", send("payments"), "publish permission on topic payments"),
        (MESSAGING + "ReceiveMessage", receive, "subscribe permission on group readers"),
        (ADMIN + "CreateTopic", api.CreateTopicRequest(), "CreateTopic needs admin rights"),
        (ADMIN + "QueryMessageById", api.QueryMessageByIdRequest(message_id="x"), "admin"),
        ("/ferrymq.admin.v1.Admin/SomethingNew", None, "admin rights"),
    ]
    for method, request, words in refused:
        with pytest.raises(Refusal) as refusal:
            access.check(method, as_producer, request)
        assert refusal.value.authenticated and words in refusal.value.message
        access.check(method, as_root, request)  # an admin may
    with pytest.raises(Refusal) as refusal:
        access.check(MESSAGING + "SendMessage", {}, send("orders"))
    assert not refusal.value.authenticated


def test_security_options_are_checked():
    base = '[cluster]\nsecret = "long-enough-secret"\n'
    config = parse_node_config(base + "[security]\nauth = true\nclock_skew_s = 60\n")
    assert config.security.auth and config.security.clock_skew_s == 60
    assert not parse_node_config("").security.auth  # off by default
    for text, words in [
        ("[security]\nauth = true\n", "cluster.secret"),
        (base + '[security]\ntls_cert = "c.pem"\n', "go together"),
        (base + '[security]\ntls_client_ca = "ca.pem"\n', "need tls_cert"),
        (base + '[security]\nadmin_access_key = "root"\n', "go together"),
        (base + '[security]\nadmin_access_key = "root"\nadmin_secret_key = "short"\n', "8"),
        (base + "[security]\nclock_skew_s = 0\n", "clock_skew_s"),
        (base + "[security]\nauth = 1\n", "true or false"),
        (base + "[security]\npassword = 1\n", "unknown option"),
    ]:
        with pytest.raises(ConfigError, match=words):
            parse_node_config(text)


def test_no_secret_of_the_configuration_shows_in_its_repr():
    config = parse_node_config(
        '[cluster]\nsecret = "the-cluster-secret"\n'
        '[security]\nadmin_access_key = "root"\nadmin_secret_key = "the-admin-secret"\n'
    )
    for shown in (repr(config), repr(config.cluster), repr(config.security), str(config)):
        assert "the-cluster-secret" not in shown and "the-admin-secret" not in shown


def test_telemetry_settings_keep_only_topics_the_user_may_publish_to():
    import asyncio

    from node.access import _publishable_settings

    user = User("app", b"x", acl=(entry("ALLOW", PUB, TOPIC, "orders"),))
    settings = pb.Settings(
        publishing=pb.Publishing(topics=[pb.Resource(name="orders"), pb.Resource(name="payments")])
    )
    subscribing = pb.Settings(subscription=pb.Subscription(group=pb.Resource(name="g")))

    async def commands():
        yield rpc.TelemetryCommand(settings=settings)
        yield rpc.TelemetryCommand(settings=subscribing)

    async def collect():
        return [c async for c in _publishable_settings(user, commands())]

    published, subscribed = asyncio.run(collect())
    assert [t.name for t in published.settings.publishing.topics] == ["orders"]
    assert subscribed.settings.WhichOneof("pub_sub") == "subscription"


def test_end_transaction_without_a_topic_needs_admin():
    box = SecretBox("the-cluster-secret")
    now = 1_790_000_000.0
    wide = User(
        "wide",
        box.seal("wide", "secret-of-wide"),
        acl=(entry("ALLOW", PUB, TOPIC, "*"), entry("DENY", PUB, TOPIC, "payments")),
    )
    access = AccessControl(authenticator(now, wide=wide))
    headers = dict(signature_headers("wide", "secret-of-wide", now_s=now))
    with pytest.raises(Refusal, match="needs admin rights"):
        access.check(MESSAGING + "EndTransaction", headers, rpc.EndTransactionRequest())


def test_group_membership_needs_subscribe_on_the_group():
    """Issue 25: any authenticated user could add members to a group (its pull consumers
    then got no queues) or evict them. A producer's heartbeat names no group."""
    box = SecretBox("the-cluster-secret")
    now = 1_790_000_000.0
    reader = User(
        "reader", box.seal("reader", "secret-of-reader"), acl=(entry("ALLOW", SUB, GROUP, "G"),)
    )
    stranger = User("stranger", box.seal("stranger", "secret-of-stranger"))
    access = AccessControl(authenticator(now, reader=reader, stranger=stranger))
    as_reader = dict(signature_headers("reader", "secret-of-reader", now_s=now))
    as_stranger = dict(signature_headers("stranger", "secret-of-stranger", now_s=now))
    of_group = pb.Resource(name="G")
    for method, request in (
        ("Heartbeat", rpc.HeartbeatRequest(group=of_group, client_type=pb.PUSH_CONSUMER)),
        ("NotifyClientTermination", rpc.NotifyClientTerminationRequest(group=of_group)),
    ):
        access.check(MESSAGING + method, as_reader, request)
        with pytest.raises(Refusal, match="no subscribe permission on group G"):
            access.check(MESSAGING + method, as_stranger, request)
    producer = rpc.HeartbeatRequest(client_type=pb.PRODUCER)
    access.check(MESSAGING + "Heartbeat", as_stranger, producer)
    access.check(
        MESSAGING + "NotifyClientTermination", as_stranger, rpc.NotifyClientTerminationRequest()
    )


def test_a_flood_of_refusals_with_made_up_access_keys_logs_at_a_bounded_rate(caplog):
    """Issue 25: the refusal log's rate limit was keyed on the access key a refused request
    claims (and on the reason, which quotes what it sent), so random keys logged every
    refusal. Now one line per method and kind per ten seconds, with the count left out."""
    import random

    box = SecretBox("the-cluster-secret")
    now = 1_790_000_000.0
    reader = User("reader", box.seal("reader", "secret-of-reader"))
    clock = [0.0]
    access = AccessControl(authenticator(now, reader=reader), clock=lambda: clock[0])
    rng = random.Random(25)
    as_reader = dict(signature_headers("reader", "secret-of-reader", now_s=now))
    caplog.set_level(logging.WARNING, logger="ferrymq.auth")
    for i in range(5_001):  # 0.002 s apart: 10 s in all
        clock[0] = i * 0.002
        key = "".join(rng.choice("abcdefghijklmnop") for _ in range(12))
        made_up = dict(signature_headers(key, "whatever", now_s=now + rng.randint(-900, 900)))
        with pytest.raises(Refusal):
            access.check(MESSAGING + "SendMessage", made_up, rpc.SendMessageRequest())
        topic = f"topic-{rng.randrange(10**9)}"  # a reason the caller chooses
        request = rpc.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name=topic))])
        with pytest.raises(Refusal):
            access.check(MESSAGING + "SendMessage", as_reader, request)
    lines = [r.getMessage() for r in caplog.records if r.name == "ferrymq.auth"]
    assert len(lines) == 4  # each kind at 0 s and once more at 10 s
    assert sum("more like it in the last 10 s not logged" in line for line in lines) == 2
    assert len(access._logged) == 2  # memory: one entry per method and kind
