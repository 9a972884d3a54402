"""A node's configuration in the console (issue 42: RocketMQ Dashboard's broker config),
``GET /api/nodes/<node_id>/config``, over HTTP against a real 3-node cluster with auth on:
the console's own node read there, another node read at that node (its Admin NodeConfig,
as the console's user), the same as the SDK gets; nothing secret in either; a user
without admin rights refused for every node; an unknown node a 404. The browser's view is
in ``tests/console/test_console_browser.py``; the service and its other doors in
``tests/node/test_node_settings.py``."""

from __future__ import annotations

import json

import pytest

from ferrymq.client import Admin, FerryError
from ferrymq.client.admin import NodeConfigInfo
from ferrymq.launcher.cluster import cluster_down, cluster_up
from tests.support.auth import APP
from tests.support.cluster import SMALL_STORE, kill
from tests.support.console import CONSOLE_SETTINGS, ROOT, ConsoleClient, console_of


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("console-node-config"))
    plan = cluster_up(
        directory, nodes=3, auto_ports=True, settings={**SMALL_STORE, **CONSOLE_SETTINGS}
    )
    try:
        with Admin(plan.nodes[0].grpc, security=ROOT) as admin:
            admin.create_user(APP.access_key, APP.secret_key)
        yield plan
    finally:
        cluster_down(directory)


@pytest.fixture(scope="module")
def root_client(cluster):
    client = ConsoleClient(console_of(cluster, cluster.nodes[0]))
    assert client.login(ROOT).status == 200
    yield client
    client.close()


def as_json(info: NodeConfigInfo) -> dict:
    """What the console answers for ``info``, the SDK's reading of the same node."""
    return {
        "node_id": info.node_id,
        "broker_group": info.broker_group,
        "settings": [
            {"section": s.section, "name": s.name, "value": s.value, "redacted": s.redacted}
            for s in info.settings
        ],
        "broker_properties": [
            {"name": name, "value": value} for name, value in sorted(info.broker_properties.items())
        ],
    }


def option(shown: dict, section: str, name: str) -> str:
    (value,) = [
        s["value"] for s in shown["settings"] if (s["section"], s["name"]) == (section, name)
    ]
    return value


def test_the_consoles_own_node_and_another_read_at_it_as_the_sdk_reads_them(cluster, root_client):
    secrets = (cluster.secret, ROOT.secret_key)
    for node in cluster.nodes:
        answer = root_client.request("GET", f"/api/nodes/{node.id}/config")
        assert answer.status == 200, answer
        shown = answer.body
        assert shown["node_id"] == node.id and shown["broker_group"] == node.group
        assert option(shown, "node", "data_dir") == node.data
        assert option(shown, "ports", "grpc") == node.grpc.rpartition(":")[2]
        assert option(shown, "cluster", "secret") == "(set, not shown)"
        assert not [secret for secret in secrets if secret in json.dumps(shown)]
        with Admin(node.grpc, security=ROOT) as admin:  # the node itself, through the SDK
            assert shown == as_json(admin.node_config())
        with Admin(cluster.nodes[0].grpc, security=ROOT) as admin:  # handed to the node
            assert as_json(admin.node_config(node.id)) == shown
    roles = []
    for node in cluster.nodes:
        shown = root_client.request("GET", f"/api/nodes/{node.id}/config").body
        roles += [p["value"] for p in shown["broker_properties"] if p["name"] == "brokerRole"]
    assert sorted(roles) == ["SLAVE", "SLAVE", "SYNC_MASTER"]


def test_a_user_without_admin_rights_is_refused_for_every_node(cluster):
    client = ConsoleClient(console_of(cluster, cluster.nodes[0]))
    assert client.login(APP).status == 200
    for node in cluster.nodes:
        answer = client.request("GET", f"/api/nodes/{node.id}/config")
        assert answer.status == 403, answer
        assert answer.body["error"] == (
            f"FORBIDDEN: user app: console:GET /api/nodes/{node.id}/config needs admin rights"
        )
    client.close()
    with Admin(cluster.nodes[0].grpc, security=APP) as app:
        for node in cluster.nodes:
            with pytest.raises(FerryError, match="needs admin rights"):
                app.node_config(node.id)


def test_an_unknown_node_is_a_404_naming_it(root_client):
    answer = root_client.request("GET", "/api/nodes/node-9/config")
    assert answer.status == 404
    assert answer.body == {"error": "UNKNOWN_NODE: no node node-9 in the cluster"}


def test_a_node_that_does_not_answer_is_a_503_naming_it(cluster, root_client):
    """Last in the module: it kills a slave that is not the console's own node."""
    with Admin(cluster.nodes[0].grpc, security=ROOT) as admin:
        master = admin.cluster_status().broker_groups[0].master
    silent = next(n for n in cluster.nodes if n.id not in (master, cluster.nodes[0].id))
    kill(cluster, silent)
    answer = root_client.request("GET", f"/api/nodes/{silent.id}/config")
    assert answer.status == 503, answer
    assert answer.body["error"].startswith(
        f"{silent.id} of broker group {silent.group} did not answer NodeConfig: UNAVAILABLE"
    )
    with (
        Admin(cluster.nodes[0].grpc, security=ROOT) as admin,
        pytest.raises(FerryError, match="UNAVAILABLE"),
    ):
        admin.node_config(silent.id)
    assert root_client.request("GET", f"/api/nodes/{master}/config").status == 200
