"""Updating a consumer group in place (issue 42): the admin service's one rule
(``node/services/admin.py`` ``update_group``) in-process over a routing state, then the
doors that call it against a real node with auth on: Admin gRPC through the SDK and the
CLI, RocketMQ 4.x's UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (mqadmin updateSubGroup), each
refusal precise and changing nothing, and what a lower maximum of delivery attempts does
to a message in flight (docs/architecture.md, "Updating a consumer group"). The console's
door is in ``tests/console/``."""

from __future__ import annotations

import asyncio
import json

import pytest

from ferrymq.cli.main import main as cli
from ferrymq.client import Admin, FerryError, Message, Producer, SimpleConsumer
from ferrymq.client.admin import GroupInfo
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from ferrymq.launcher.cluster import free_ports
from ferrymq.launcher.polling import until
from node.rpc_status import AccessDenied
from node.services.admin import AdminRefused, AdminService
from node.services.caller import Caller, Door
from node.services.permissions import Permissions
from routing.acl import User
from routing.commands import CreateGroup, RegisterNode, SetRoutingFormat, UpdateGroup
from routing.encoding import decode_entry
from routing.formats import PICKLED, PROTOBUF
from routing.metadata import GroupConfig
from routing.replica import RoutingReplica
from routing.state import RoutingState
from tests.support.auth import APP, AUTH_TOML, ROOT
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient

ADMIN = Caller(Door.FERRY, "UpdateGroup", User("root", b"sealed", admin=True))
APP_USER = Caller(Door.FERRY, "UpdateGroup", User("app", b"sealed"))


class Routing:
    """A routing state that commits each submitted command at once, keeping them."""

    def __init__(self) -> None:
        self.state = RoutingState()
        assert self.state.apply(RegisterNode("node-1", "group-1", "127.0.0.1:1")).ok
        assert self.state.apply(CreateGroup("billing", 16)).ok
        self.submitted: list[object] = []

    def read(self, view):
        return view(self.state)

    async def submit(self, command: object):
        self.submitted.append(command)
        return self.state.apply(command)


def service(routing: Routing, auth: bool = False) -> AdminService:
    return AdminService(None, None, None, None, "group-1", routing, Permissions(enabled=auth))


def update(admin: AdminService, caller: Caller = ADMIN, name: str = "billing", **values):
    return asyncio.run(admin.update_group(caller, name, **values))


def refusal(admin: AdminService, caller: Caller = ADMIN, name: str = "billing", **values):
    with pytest.raises((AdminRefused, AccessDenied)) as refused:
        update(admin, caller, name, **values)
    return refused.value


def test_the_service_updates_what_is_named_and_commits_one_routing_command():
    routing = Routing()
    admin = service(routing)
    assert update(admin, max_delivery_attempts=3) == GroupConfig("billing", 3, False, False)
    assert update(admin, fifo=True, lite_exclusive=True) == GroupConfig("billing", 3, True, True)
    assert routing.submitted == [
        UpdateGroup("billing", 3, None, None),
        UpdateGroup("billing", None, True, True),
    ]
    assert routing.state.groups["billing"] == GroupConfig("billing", 3, True, True)


def test_an_update_that_changes_nothing_costs_no_routing_change_even_while_upgrading():
    """mqadmin's updateSubGroup sends a group's whole config to every master: the later
    masters find nothing to change, and must succeed during a rolling upgrade too."""
    routing = Routing()
    admin = service(routing)
    assert routing.state.apply(RegisterNode("old", "group-1", "127.0.0.1:2", routing_format=1)).ok
    assert routing.state.awaits_finalize and routing.state.members["old"].routing_format == PICKLED
    assert update(admin, max_delivery_attempts=16, fifo=False) == GroupConfig("billing", 16)
    assert update(admin) == GroupConfig("billing", 16)
    waiting = refusal(admin, max_delivery_attempts=3)
    assert waiting.code == 9  # FAILED_PRECONDITION
    assert waiting.message.startswith("UPGRADE_NOT_FINALIZED: updating a group waits until")
    assert routing.submitted == []
    assert routing.state.groups["billing"] == GroupConfig("billing", 16)


def test_each_refusal_is_precise_and_changes_nothing():
    routing = Routing()
    admin = service(routing, auth=True)
    forbidden = refusal(admin, APP_USER, max_delivery_attempts=3)
    assert isinstance(forbidden, AccessDenied) and "needs admin rights" in str(forbidden)
    unknown = refusal(admin, name="nobody", max_delivery_attempts=3)
    assert (
        unknown.code == 5
        and unknown.message == "CONSUMER_GROUP_NOT_FOUND: group nobody does not exist"
    )
    for bad in (0, -1, 1001):
        illegal = refusal(admin, max_delivery_attempts=bad)
        assert illegal.code == 3
        assert illegal.message == "ILLEGAL_CONSUMER_GROUP: max delivery attempts must be 1..1000"
    assert refusal(admin, name="bad name", fifo=True).code == 3
    assert routing.submitted == []
    assert routing.state.groups["billing"] == GroupConfig("billing", 16)


def test_while_an_older_node_may_follow_the_log_no_update_reaches_it(tmp_path):
    """Through a real routing replica (a lone voter): while a node of 0.1.0 is registered,
    the service refuses a change before anything is handed to Raft, so the log holds no
    UpdateGroup that node could not unpickle; once every node reads format 2 and the
    upgrade is finalized, the same update is committed and applied."""
    (voter,) = (f"127.0.0.1:{port}" for port in free_ports(1))
    replica = RoutingReplica(
        self_address=voter, voters=[voter], secret="s", data_dir=str(tmp_path), lease_s=3.0
    )
    handed: list[object] = []
    apply = replica.machine.apply

    def recording(command, **kwargs):
        handed.append(command)
        return apply(command, **kwargs)

    admin = service(replica)
    try:
        until(replica.leads_with_quorum, 20, "the lone voter to lead")
        replica.machine.apply = recording
        for command in (
            RegisterNode("old", "group-1", "old:1", routing_format=PICKLED),
            CreateGroup("billing", 16),
        ):
            assert asyncio.run(replica.submit(command)).ok
        assert replica.state.awaits_finalize
        handed.clear()
        waiting = refusal(admin, max_delivery_attempts=3)
        assert waiting.code == 9 and waiting.message.startswith("UPGRADE_NOT_FINALIZED")
        assert handed == []  # nothing reached the log
        assert update(admin, max_delivery_attempts=16) == GroupConfig("billing", 16)
        assert handed == []  # nothing to change: no command either
        assert asyncio.run(replica.submit(RegisterNode("old", "group-1", "old:1"))).ok
        assert asyncio.run(replica.submit(SetRoutingFormat(PROTOBUF))).ok
        assert update(admin, max_delivery_attempts=3) == GroupConfig("billing", 3)
        assert isinstance(decode_entry(handed[-1]).command, UpdateGroup)  # format 2, tracked
        assert replica.state.groups["billing"].max_delivery_attempts == 3
    finally:
        replica.close()


# ---- the doors, on a real node ---------------------------------------------------------------
@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    directory = tmp_path_factory.mktemp("group-update")
    node = start_node(str(directory / "node"), AUTH_TOML)
    try:
        with Admin(node.address, security=ROOT) as admin:
            admin.create_user(APP.access_key, APP.secret_key)
            admin.create_topic("invoices", 1)
        yield node
    finally:
        node.sigterm()


def group_of(address: str, name: str):
    with Admin(address, security=ROOT) as admin:
        return next(g for g in admin.list_groups() if g.name == name)


def test_the_sdk_updates_a_group_through_admin_grpc_and_refusals_change_nothing(secured):
    with Admin(secured.address, security=ROOT) as admin:
        admin.create_group("sdk-billing", max_delivery_attempts=16, lite_exclusive=True)
        updated = admin.update_group("sdk-billing", max_delivery_attempts=4, fifo=True)
        assert (updated.max_delivery_attempts, updated.fifo, updated.lite_exclusive) == (
            4,
            True,
            True,
        )
        assert admin.update_group("sdk-billing", lite_exclusive=False).lite_exclusive is False
        for call, code, reason in (
            (lambda: admin.update_group("nobody", fifo=True), "NOT_FOUND", "CONSUMER_GROUP"),
            (
                lambda: admin.update_group("sdk-billing", max_delivery_attempts=0),
                "INVALID_ARGUMENT",
                "max delivery attempts must be 1..1000",
            ),
        ):
            with pytest.raises(FerryError) as refused:
                call()
            assert code in str(refused.value) and reason in str(refused.value)
    with Admin(secured.address, security=APP) as app, pytest.raises(FerryError) as forbidden:
        app.update_group("sdk-billing", max_delivery_attempts=9)
    assert "needs admin rights" in str(forbidden.value)
    after = group_of(secured.address, "sdk-billing")
    assert (after.max_delivery_attempts, after.fifo, after.lite_exclusive) == (4, True, False)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_cli_updates_a_group_and_names_what_to_change(secured, capsys, monkeypatch):
    monkeypatch.setenv("FERRYMQ_ACCESS_KEY", ROOT.access_key)
    monkeypatch.setenv("FERRYMQ_SECRET_KEY", ROOT.secret_key)
    server = ("--server", secured.address)
    assert run_cli(capsys, "group", "create", "cli-billing", "--fifo", *server)[0] == 0
    code, out, _ = run_cli(capsys, "group", "update", "cli-billing", "--max-attempts", "5", *server)
    assert code == 0
    assert (
        out.strip() == "updated group cli-billing: max attempts 5, fifo true, lite exclusive false"
    )
    code, out, _ = run_cli(
        capsys, "group", "update", "cli-billing", "--no-fifo", "--lite-exclusive", "--json", *server
    )
    assert code == 0 and json.loads(out) == {
        "name": "cli-billing",
        "max_delivery_attempts": 5,
        "fifo": False,
        "lite_exclusive": True,
    }
    code, _, err = run_cli(capsys, "group", "update", "cli-billing", *server)
    assert code == 2 and "name what to change: --max-attempts" in err
    code, _, err = run_cli(capsys, "group", "update", "nobody", "--fifo", *server)
    assert code == 1 and "NOT_FOUND" in err and "group nobody does not exist" in err
    code, _, err = run_cli(capsys, "group", "update", "cli-billing", "--max-attempts", "0", *server)
    assert code == 1 and "INVALID_ARGUMENT" in err
    after = group_of(secured.address, "cli-billing")
    assert (after.max_delivery_attempts, after.fifo, after.lite_exclusive) == (5, False, True)


def test_a_lower_maximum_counts_at_the_next_delivery_of_a_message_in_flight(secured):
    """Delivered twice under a maximum of 16, then the maximum goes to 2: when its
    invisibility ends the message is not delivered a third time but dead-lettered."""
    with Admin(secured.address, security=ROOT) as admin:
        admin.create_group("lowered", max_delivery_attempts=16)
    with Producer(secured.address, security=ROOT) as producer:
        producer.send(Message("invoices", b"invoice-1", keys=["invoice-1"]))
    with SimpleConsumer(secured.address, "lowered", "invoices", security=ROOT) as consumer:
        attempts = []
        for _ in range(2):
            got = until(lambda: consumer.receive(max_messages=1, invisible_s=1, wait_s=2), 20)
            attempts.append(got[0].delivery_attempt)
        assert attempts == [1, 2]
        with Admin(secured.address, security=ROOT) as admin:
            assert admin.update_group("lowered", max_delivery_attempts=2).max_delivery_attempts == 2
        with Admin(secured.address, security=ROOT) as admin:

            def dead_lettered():
                consumer.receive(max_messages=1, invisible_s=1, wait_s=1)  # meets it when due
                return admin.dead_letters("lowered").entries

            entries = until(dead_lettered, 30, "the message in the group's dead-letter queue")
        assert [(e.keys, e.attempts) for e in entries] == [("invoice-1", 2)]
        assert consumer.receive(max_messages=1, invisible_s=1, wait_s=1) == []


def subscription_group(client: RemotingClient, **config) -> RemotingCommand:
    """mqadmin updateSubGroup's request: a SubscriptionGroupConfig as its JSON body."""
    body = json.dumps(config).encode()
    return client.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)


def test_the_4x_door_creates_a_group_or_updates_an_existing_one_in_place(secured):
    """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP as RocketMQ's broker answers it: the body's
    attempts (retryMaxTimes + 1) and order replace the group's, its lite model only when
    the attributes name it; the same body again changes nothing; admins only."""
    with RemotingClient(secured.remoting, security=ROOT) as client:
        made = subscription_group(
            client,
            groupName="mq-billing",
            retryMaxTimes=2,
            attributes={"+lite.sub.model": "Exclusive"},
        )
        assert made.code == ResponseCode.SUCCESS, made
        assert group_of(secured.address, "mq-billing") == GroupInfo("mq-billing", 3, False, True)
        for _ in range(2):  # the second: what each later master of one updateSubGroup gets
            updated = subscription_group(
                client, groupName="mq-billing", retryMaxTimes=5, consumeMessageOrderly=True
            )
            assert updated.code == ResponseCode.SUCCESS, updated
            assert group_of(secured.address, "mq-billing") == GroupInfo("mq-billing", 6, True, True)
        shared = subscription_group(
            client, groupName="mq-billing", retryMaxTimes=5, attributes={"-lite.sub.model": ""}
        )
        assert shared.code == ResponseCode.SUCCESS, shared
        assert group_of(secured.address, "mq-billing") == GroupInfo("mq-billing", 6, False, False)
        too_many = subscription_group(client, groupName="mq-billing", retryMaxTimes=1000)
        assert too_many.code == ResponseCode.SYSTEM_ERROR
        assert "max delivery attempts must be 1..1000" in too_many.remark
    with RemotingClient(secured.remoting, security=APP) as client:
        refused = subscription_group(client, groupName="mq-billing", retryMaxTimes=0)
        assert refused.code == ResponseCode.NO_PERMISSION
        assert refused.remark.endswith("needs admin rights")
    assert group_of(secured.address, "mq-billing") == GroupInfo("mq-billing", 6, False, False)
