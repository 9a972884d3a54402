"""A node's configuration (issue 42, RocketMQ Dashboard's broker config): the node settings
service's one rule (``node/services/node_settings.py``) in-process: every option of
``node.toml`` shown with its effective value, the one list of secrets covering every secret
option and none of their values ever shown, admins only with auth on; then the doors that
call it against a real node with auth on: Admin NodeConfig through the SDK and the CLI, and
RocketMQ 4.x's GET_BROKER_CONFIG answering the service's RocketMQ names. The console's door,
and another node's configuration read through the one asked, are in
``tests/console/test_console_node_config.py``."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib

import pytest

from ferrymq.cli.main import main as cli
from ferrymq.client import Admin, FerryError
from ferrymq.codec.remoting_codes import RequestCode, ResponseCode
from node.config import (
    ClusterOptions,
    MetricsOptions,
    NodeConfig,
    SecurityOptions,
    effective_settings,
    render_node_config,
)
from node.rpc_status import AccessDenied
from node.services.admin import AdminRefused
from node.services.caller import Caller, Door
from node.services.node_settings import (
    SECRET_SETTINGS,
    SET_NOT_SHOWN,
    NodeSettingsService,
    setting_text,
)
from node.services.permissions import Permissions
from routing.acl import User
from routing.commands import RegisterNode
from routing.state import RoutingState
from store.config import StoreConfig
from tests.support.auth import APP, AUTH_TOML, CLUSTER_SECRET, ROOT
from tests.support.nodes import start_node
from tests.support.remoting_client import RemotingClient

ADMIN = Caller(Door.FERRY, "NodeConfig", User("root", b"sealed", admin=True))
APP_USER = Caller(Door.FERRY, "NodeConfig", User("app", b"sealed"))
NOBODY = Caller(Door.FERRY, "NodeConfig", None)
# Words that make an option a secret unless it is named below with why it is not.
SECRET_WORDS = re.compile(r"secret|token|password|private|(^|_)key$")
NOT_SECRET = {("security", "admin_access_key"): "an access key names a user, as in a log line"}
# Distinct values of every secret, to look for in everything shown.
SECRET_VALUES = {
    ("cluster", "secret"): "cluster-secret-never-shown",
    ("security", "admin_secret_key"): "admin-secret-never-shown",
    ("metrics", "bearer_token"): "bearer-token-never-shown-0123",
    ("security", "tls_key"): "/pki/private-key-path-never-shown.pem",
}
BEARER_TOKEN = "metrics-bearer-token-of-the-test"


class Routing:
    """A routing state read under no lock (one test thread)."""

    def __init__(self, *node_ids: str) -> None:
        self.state = RoutingState()
        for number, node_id in enumerate(node_ids, start=1):
            assert self.state.apply(RegisterNode(node_id, "group-1", f"127.0.0.1:{number}")).ok

    def read(self, view):
        return view(self.state)


def secret_config() -> NodeConfig:
    """A configuration with every secret set to a value of ``SECRET_VALUES``."""
    return NodeConfig(
        metrics=MetricsOptions(bearer_token=SECRET_VALUES["metrics", "bearer_token"]),
        cluster=ClusterOptions(
            voters=("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"),
            secret=SECRET_VALUES["cluster", "secret"],
        ),
        security=SecurityOptions(
            auth=True,
            admin_access_key="root",
            admin_secret_key=SECRET_VALUES["security", "admin_secret_key"],
            tls_cert="/pki/cert.pem",
            tls_key=SECRET_VALUES["security", "tls_key"],
        ),
    )


def service(config: NodeConfig, auth: bool = False, *node_ids: str) -> NodeSettingsService:
    routing = Routing(*(node_ids or (config.id,)))
    return NodeSettingsService(config, routing, Permissions(enabled=auth), is_master=lambda: True)


def section_classes() -> dict[str, type]:
    """The dataclass holding each section's options."""
    config = NodeConfig()
    classes: dict[str, type] = {"node": NodeConfig, "store": StoreConfig}
    for section in effective_settings(config).keys() - classes.keys():
        classes[section] = type(getattr(config, section))
    return classes


def test_the_secret_list_names_every_secret_option_of_node_toml():
    """An option is a secret when its dataclass keeps it out of repr or its name says so;
    a new one (a password, another token) fails here until it is on the list."""
    classes = section_classes()
    found = set()
    for section, options in effective_settings(NodeConfig()).items():
        hidden = {f.name for f in dataclasses.fields(classes[section]) if not f.repr}
        for name in options:
            named = SECRET_WORDS.search(name) and (section, name) not in NOT_SECRET
            if named or name in hidden:
                found.add((section, name))
    assert found == SECRET_SETTINGS
    assert set(SECRET_VALUES) == SECRET_SETTINGS  # the next test sets each of them


def test_no_secret_value_is_ever_shown_only_whether_it_is_set():
    shown = service(secret_config()).settings(ADMIN)
    everything = repr(shown) + json.dumps(dataclasses.asdict(shown))
    for (section, name), value in SECRET_VALUES.items():
        assert value not in everything, (section, name)
    by_option = {(s.section, s.name): s for s in shown.settings}
    assert {key for key, s in by_option.items() if s.redacted} == SECRET_SETTINGS
    assert {by_option[key].value for key in SECRET_SETTINGS} == {SET_NOT_SHOWN}
    unset = service(NodeConfig()).settings(ADMIN)
    assert {(s.section, s.name, s.value) for s in unset.settings if s.redacted} == {
        (section, name, "") for section, name in SECRET_SETTINGS
    }
    assert by_option["security", "admin_access_key"].value == "root"
    assert by_option["security", "tls_cert"].value == "/pki/cert.pem"


def test_every_option_is_shown_as_the_effective_node_toml_says_it():
    """The node.toml the node writes at start (secrets left out) and what is shown agree
    on every option, section by section in the file's order."""
    config = dataclasses.replace(
        secret_config(), store={"flush_mode": "SYNC_FLUSH", "retention_ms": 3_600_000}
    )
    written = tomllib.loads(render_node_config(config))
    shown = service(config).settings(ADMIN)
    sections = list(dict.fromkeys(s.section for s in shown.settings))
    assert sections == [
        "node",
        "ports",
        "metrics",
        "messages",
        "remoting",
        "lite",
        "console",
        "store",
        "cluster",
        "replication",
        "security",
    ]
    by_option = {(s.section, s.name): s for s in shown.settings}
    compared = 0
    for section, options in written.items():
        for name, value in options.items():
            if (section, name) in SECRET_SETTINGS:
                continue
            assert by_option[section, name].value == setting_text(value), (section, name)
            compared += 1
    assert compared == len(by_option) - len(SECRET_SETTINGS)  # every other option compared
    assert by_option["store", "flush_mode"].value == "SYNC_FLUSH"
    assert by_option["store", "retention_ms"].value == "3600000"
    assert by_option["cluster", "voters"].value == "127.0.0.1:1, 127.0.0.1:2, 127.0.0.1:3"
    assert by_option["replication", "mode"].value == "SYNC"
    properties = dict(shown.broker_properties)
    assert (properties["flushDiskType"], properties["fileReservedTime"]) == ("SYNC_FLUSH", "1")
    assert properties["aclEnable"] == "true" and properties["brokerName"] == config.group


def test_with_auth_on_only_an_admin_may_read_it_and_anyone_with_it_off():
    guarded = service(NodeConfig(), True, "node-1", "node-2")
    for caller, authenticated in ((APP_USER, True), (NOBODY, False)):
        for read in (
            guarded.settings,
            guarded.broker_properties,
            lambda c: guarded.member(c, "node-2"),
        ):
            with pytest.raises(AccessDenied) as refused:
                read(caller)
            assert refused.value.authenticated is authenticated
    with pytest.raises(AccessDenied, match="FORBIDDEN: user app: NodeConfig needs admin rights"):
        guarded.settings(APP_USER)
    assert guarded.settings(ADMIN).node_id == "node-1"
    assert service(NodeConfig()).settings(NOBODY).broker_group == "group-1"


def test_a_node_id_names_this_node_another_to_ask_or_none_known():
    settings = service(NodeConfig(), True, "node-1", "node-2")
    assert settings.member(ADMIN, "") is None
    assert settings.member(ADMIN, "node-1") is None
    assert settings.member(ADMIN, "node-2").grpc_address == "127.0.0.1:2"
    with pytest.raises(AdminRefused) as unknown:
        settings.member(ADMIN, "node-9")
    assert unknown.value.code == 5
    assert unknown.value.message == "UNKNOWN_NODE: no node node-9 in the cluster"


def test_broker_id_is_minus_one_while_routes_do_not_name_the_node():
    """A node that routing lists in no broker group's routes yet is not broker 0."""
    properties = service(NodeConfig(), False, "node-1").broker_properties(ADMIN)
    assert properties["brokerId"] == "-1" and properties["listenPort"] == "0"
    assert properties["brokerRole"] == "SYNC_MASTER"  # the store's role, as it runs


# ---- the doors, on a real node ---------------------------------------------------------------
@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    directory = tmp_path_factory.mktemp("node-settings")
    metrics = f'\n[metrics]\nbearer_token = "{BEARER_TOKEN}"\n'
    node = start_node(str(directory / "node"), AUTH_TOML + metrics)
    try:
        with Admin(node.address, security=ROOT) as admin:
            admin.create_user(APP.access_key, APP.secret_key)
        yield node
    finally:
        node.sigterm()


SECRETS_OF_THE_NODE = (CLUSTER_SECRET, ROOT.secret_key, BEARER_TOKEN)


def test_the_sdk_reads_the_configuration_through_admin_grpc_nothing_secret(secured):
    with Admin(secured.address, security=ROOT) as admin:
        info = admin.node_config()
        assert admin.node_config("node-1") == info
        with pytest.raises(FerryError) as unknown:
            admin.node_config("node-9")
    assert "NOT_FOUND" in str(unknown.value) and "UNKNOWN_NODE: no node node-9" in str(
        unknown.value
    )
    assert (info.node_id, info.broker_group) == ("node-1", "group-1")
    assert info.value("node", "data_dir") == secured.data_dir
    assert info.value("ports", "grpc") == "0"  # as configured: the OS picked the port
    assert info.value("security", "auth") == "true"
    assert info.value("security", "admin_access_key") == ROOT.access_key
    for section, name in SECRET_SETTINGS - {("security", "tls_key")}:
        assert info.value(section, name) == SET_NOT_SHOWN
    assert info.value("security", "tls_key") == ""  # not set: the made certificate's
    assert not [secret for secret in SECRETS_OF_THE_NODE if secret in repr(info)]
    assert info.broker_properties["brokerRole"] == "SYNC_MASTER"
    assert info.broker_properties["listenPort"] == secured.remoting.rpartition(":")[2]
    with Admin(secured.address, security=APP) as app, pytest.raises(FerryError) as forbidden:
        app.node_config()
    assert "needs admin rights" in str(forbidden.value)


def test_get_broker_config_answers_the_services_rocketmq_names(secured):
    with Admin(secured.address, security=ROOT) as admin:
        expected = admin.node_config().broker_properties
    with RemotingClient(secured.remoting, security=ROOT) as client:
        answer = client.call(RequestCode.GET_BROKER_CONFIG)
    assert answer.code == ResponseCode.SUCCESS, answer
    properties = dict(line.split("=", 1) for line in answer.body.decode().splitlines() if line)
    assert properties == expected
    assert properties["brokerId"] == "0" and properties["aclEnable"] == "true"
    assert not [secret for secret in SECRETS_OF_THE_NODE if secret.encode() in answer.body]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_cli_shows_the_configuration_by_section_and_under_rocketmqs_names(
    secured, capsys, monkeypatch
):
    monkeypatch.setenv("FERRYMQ_ACCESS_KEY", ROOT.access_key)
    monkeypatch.setenv("FERRYMQ_SECRET_KEY", ROOT.secret_key)
    server = ("--server", secured.address)
    code, out, _ = run_cli(capsys, "cluster", "config", *server)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "node node-1, broker group group-1"
    assert re.search(r"^cluster\s+secret\s+\(set, not shown\)$", out, re.MULTILINE)
    assert re.search(r"^replication\s+mode\s+SYNC$", out, re.MULTILINE)
    assert re.search(r"^brokerName\s+group-1$", out, re.MULTILINE)
    assert not [secret for secret in SECRETS_OF_THE_NODE if secret in out]
    code, out, _ = run_cli(capsys, "cluster", "config", "--node", "node-1", "--json", *server)
    shown = json.loads(out)
    assert code == 0 and shown["node_id"] == "node-1"
    data_dir = {"section": "node", "name": "data_dir", "value": secured.data_dir}
    assert data_dir | {"redacted": False} in shown["settings"]
    assert shown["broker_properties"]["brokerClusterName"] == "DefaultCluster"
    code, _, err = run_cli(capsys, "cluster", "config", "--node", "node-9", *server)
    assert code == 1 and "NOT_FOUND" in err and "UNKNOWN_NODE: no node node-9" in err
    monkeypatch.setenv("FERRYMQ_ACCESS_KEY", APP.access_key)
    monkeypatch.setenv("FERRYMQ_SECRET_KEY", APP.secret_key)
    code, _, err = run_cli(capsys, "cluster", "config", *server)
    assert code == 1 and "needs admin rights" in err
