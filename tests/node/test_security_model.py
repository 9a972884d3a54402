"""The security model on its own: ACL decisions (deny wins, wildcards), user commands in
the routing state machine, sealed secrets, signature verification and the permissions the
services ask for each job. No processes: the end-to-end checks are in test_security_auth.py."""

from __future__ import annotations

import logging
import pickle

import pytest

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.authentication import (
    AuthenticationError,
    Authenticator,
    Verification,
    sign,
    signature_headers,
)
from node.config import ConfigError, parse_node_config
from node.rpc_status import AccessDenied
from node.secret_box import SealError, SecretBox
from node.services.caller import Caller, Door
from node.services.permissions import ADMIN, Permissions, consume, describe, publish, read
from node.services.transactions import CheckTargets
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


def caller(user: User | None, method: str = "test") -> Caller:
    return Caller(Door.MESSAGING, method, user)


def test_each_job_needs_the_permissions_of_the_resources_it_names():
    """The services' one ACL decision (``node/services/permissions.py``): the needs of
    each job, on the names its request carries."""
    producer = User(
        "producer",
        b"x",
        acl=(entry("ALLOW", PUB, TOPIC, "orders"), entry("ALLOW", SUB, TOPIC, "orders")),
    )
    admin = User("root", b"x", admin=True)
    permissions = Permissions(enabled=True)
    for needs in (publish("orders"), read("orders"), describe("orders"), ()):
        permissions.require(caller(producer), needs)
    refused = [
        (publish("payments"), "no publish permission on topic payments"),
        (consume("orders", "readers"), "no subscribe permission on group readers"),
        (consume("%RETRY%readers", "readers"), "no subscribe permission on group readers"),
        (publish("%RETRY%readers"), "no subscribe permission on group readers"),
        ([ADMIN], "test needs admin rights"),
        (publish(""), "needs admin rights"),  # a request naming no topic acts on any
        (read("%SYS%TRANS_HALF"), "topic %SYS%TRANS_HALF"),
    ]
    for needs, words in refused:
        with pytest.raises(AccessDenied) as denied:
            permissions.require(caller(producer), needs)
        assert denied.value.authenticated and denied.value.code == pb.FORBIDDEN
        assert words in str(denied.value)
        assert not permissions.may(caller(producer), needs)
        permissions.require(caller(admin), needs)  # an admin may
    with pytest.raises(AccessDenied) as denied:  # a door that forgot to authenticate
        permissions.require(caller(None), publish("orders"))
    assert not denied.value.authenticated and denied.value.code == pb.UNAUTHORIZED
    Permissions(enabled=False).require(caller(None), [ADMIN])  # auth off: everything


def test_bad_credentials_are_refused_by_either_doors_verification():
    box = SecretBox("the-cluster-secret")
    now = 1_790_000_000.0
    app = User("app", box.seal("app", "secret-of-app"))
    verification = Verification(authenticator(now, app=app))
    assert (
        verification.of_metadata(
            "SendMessage", dict(signature_headers("app", "secret-of-app", now_s=now))
        )
        == app
    )
    for metadata in ({}, dict(signature_headers("app", "wrong", now_s=now))):
        with pytest.raises(AccessDenied) as denied:
            verification.of_metadata("SendMessage", metadata)
        assert not denied.value.authenticated and "UNAUTHENTICATED" in str(denied.value)
    with pytest.raises(AccessDenied, match="carries no AccessKey and Signature"):
        verification.of_signature("remoting:SEND_MESSAGE_V2", "", "", [b"x"])


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


def test_a_producer_is_asked_only_about_halves_of_topics_it_may_publish_to():
    """A producer's settings (or a 4.x heartbeat's producer groups) name what it
    produces for; the node sends it orphan checks, whole messages: only of topics its user
    may publish to, whatever it named (``CheckTargets``)."""
    from types import SimpleNamespace

    permissions = Permissions(enabled=True)
    targets = CheckTargets(permissions)
    app = User("app", b"x", acl=(entry("ALLOW", PUB, TOPIC, "orders"),))
    asked: list[str] = []
    targets.register(
        "stream",
        caller(app),
        lambda transaction_id, half: asked.append(transaction_id) or True,
        topics=["orders", "payments"],
        groups=["pg"],
    )

    def half(topic: str) -> SimpleNamespace:
        return SimpleNamespace(properties={"REAL_TOPIC": topic, "PGROUP": "pg"})

    assert targets.offer("T1", half("orders"))
    assert not targets.offer("T2", half("payments"))  # named, but not the user's to publish
    assert asked == ["T1"]
    targets.unregister("stream")
    assert not targets.registered


def test_ending_a_transaction_needs_publish_on_the_topic_of_its_half(tmp_path):
    """The half's topic is read from the node's record of it, never from the request: a
    request naming another topic, or none, cannot end another user's transaction."""
    import asyncio

    from node.services.transactions import EndRequest, TransactionService
    from store.config import StoreConfig
    from store.message import Message
    from store.message_store import MessageStore
    from tests.support.transactions import STORE as SMALL_STORE

    store = MessageStore.open(StoreConfig(str(tmp_path), **SMALL_STORE))
    try:
        service = TransactionService(store, 60_000, 3, Permissions(enabled=True))
        half, transaction_id = TransactionService.half_of(Message.build("payments", b"x"))
        service.sent(
            transaction_id, "payments", store.put_messages([half]).appended[0].queue_offset
        )
        wide = User(
            "wide",
            b"x",
            acl=(entry("ALLOW", PUB, TOPIC, "*"), entry("DENY", PUB, TOPIC, "payments")),
        )
        for named in ("", "orders", "payments"):
            request = EndRequest(transaction_id, pb.COMMIT, topic=named)
            with pytest.raises(AccessDenied, match="publish permission on topic payments"):
                asyncio.run(service.end(caller(wide), request))
        assert service.pending == 1
    finally:
        store.shutdown()


def test_group_membership_needs_subscribe_on_the_group():
    """Issue 25: any authenticated user could add members to a group (its pull consumers
    then got no queues) or evict them. A producer's heartbeat names no group."""
    import asyncio

    from node.client_registry import ClientConnections
    from node.consumer_subscriptions import Subscriptions
    from node.group_creation import GroupsOnFirstUse
    from node.group_members import GroupMembers
    from node.services.membership import ClientHeartbeat, ConsumerMembership, MembershipService
    from node.topics import GroupConfig, TopicTable

    members, subscriptions = GroupMembers(), Subscriptions()
    membership = MembershipService(
        members,
        subscriptions,
        ClientConnections(members, subscriptions),
        GroupsOnFirstUse(TopicTable(groups=[GroupConfig("G")]), None, enabled=False),
        Permissions(enabled=True),
    )
    reader = User("reader", b"x", acl=(entry("ALLOW", SUB, GROUP, "G"),))
    stranger = User("stranger", b"x")
    joining = ClientHeartbeat("c1", {"G": ConsumerMembership()})
    asyncio.run(membership.heartbeat(caller(reader), joining))
    with pytest.raises(AccessDenied, match="no subscribe permission on group G"):
        asyncio.run(
            membership.heartbeat(
                caller(stranger), ClientHeartbeat("c2", {"G": ConsumerMembership()})
            )
        )
    with pytest.raises(AccessDenied, match="no subscribe permission on group G"):
        membership.leave(caller(stranger), "G", "c1")
    asyncio.run(membership.heartbeat(caller(stranger), ClientHeartbeat("p1")))  # a producer's
    assert [client for client, _ in members.live("G")] == ["c1"]


def test_a_flood_of_refusals_with_made_up_access_keys_logs_at_a_bounded_rate(caplog):
    """Issue 25: the refusal log's rate limit was keyed on the access key a refused request
    claims (and on the reason, which quotes what it sent), so random keys logged every
    refusal. Now one line per method and kind per ten seconds, with the count left out."""
    import random

    box = SecretBox("the-cluster-secret")
    now = 1_790_000_000.0
    reader = User("reader", box.seal("reader", "secret-of-reader"))
    clock = [0.0]
    verification = Verification(authenticator(now, reader=reader), clock=lambda: clock[0])
    permissions = Permissions(enabled=True, clock=lambda: clock[0])
    rng = random.Random(25)
    caplog.set_level(logging.WARNING, logger="ferrymq.auth")
    for i in range(5_001):  # 0.002 s apart: 10 s in all
        clock[0] = i * 0.002
        key = "".join(rng.choice("abcdefghijklmnop") for _ in range(12))
        made_up = dict(signature_headers(key, "whatever", now_s=now + rng.randint(-900, 900)))
        with pytest.raises(AccessDenied):
            verification.of_metadata("SendMessage", made_up)
        topic = f"topic-{rng.randrange(10**9)}"  # a reason the caller chooses
        with pytest.raises(AccessDenied):
            permissions.require(caller(reader, "SendMessage"), publish(topic))
    lines = [r.getMessage() for r in caplog.records if r.name == "ferrymq.auth"]
    assert len(lines) == 4  # each kind at 0 s and once more at 10 s
    assert sum("more like it in the last 10 s not logged" in line for line in lines) == 2
    # memory: one entry per call and kind
    assert len(verification._log._windows) == len(permissions._log._windows) == 1
