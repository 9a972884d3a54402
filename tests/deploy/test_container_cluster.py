"""The image run as operators run it: the 3-node cluster of deploy/kubernetes/podman played
with ``podman kube play --network host`` (each node on its own loopback ports, chosen by the
OS), then the compose project of deploy/compose with podman-compose.

The official Python client (RocketMQ 5.x) sends and consumes from the host; the group's
master is killed with ``podman kill -s KILL`` while the client sends, then started again on
its volume; every message the client saw acknowledged must be consumed afterwards. The
image's HEALTHCHECK answers, and SIGTERM (through tini, PID 1) stops a node with exit 0.

Everything the test makes goes at its end: pods, containers, volumes, the podman secret,
and any netavark rule or ip_forward change (``deploy/image/podman.py``). ``make test-image``
(the ``container`` marker): it needs root, podman from Debian (installed when missing) and
builds the image from this checkout (cached layers: seconds when nothing changed).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import yaml

from deploy.image.build import build_image
from deploy.image.podman import host_network, podman, restore_host_network
from deploy.kubernetes import manifests, play
from deploy.kubernetes.container import SECRET_OPTIONS
from ferrymq.client import Admin, ClientSecurity
from ferrymq.launcher.cluster import ClusterPlan, plan_cluster
from tests.support.official_client import run_official_at

# A first run installs podman and builds the image (debootstrap included) in its first test.
pytestmark = [pytest.mark.container, pytest.mark.timeout(1200)]

TOPIC = "container-orders"
GROUP = "container-readers"
READY_TIMEOUT_S = 120.0
PREFIX = f"ferrymq-test-{os.getpid()}"


@dataclass(frozen=True)
class Cluster:
    played: play.PlayedCluster
    plan: ClusterPlan
    secrets: dict[str, str]
    cold_start_s: float

    def container(self, node_id: str) -> str:
        return f"{PREFIX}-{node_id}-ferrymq"

    def address(self, node_id: str) -> str:
        return next(n.grpc for n in self.plan.nodes if n.id == node_id)

    def credentials(self) -> dict[str, str]:
        return {"access_key": "admin", "secret_key": self.secrets["admin-secret-key"]}


@pytest.fixture(scope="module")
def image() -> str:
    return build_image()["tag"]


@pytest.fixture(scope="module")
def clean_host(image) -> Iterator[None]:
    """Whatever podman adds to the host's network (none with the host's network, but a
    bridge network's netavark rules and ip_forward if one was made) is removed; so is what
    an earlier run of this test left when it was killed (its process gone)."""
    remove_orphans()
    before = host_network()
    yield
    restore_host_network(before)
    leftovers = podman("ps", "--all", "--format", "{{.Names}}", "--filter", f"name={PREFIX}")
    volumes = podman("volume", "ls", "--format", "{{.Name}}", "--filter", f"name={PREFIX}")
    networks = podman("network", "ls", "--format", "{{.Name}}", "--filter", f"name={PREFIX}")
    assert not (leftovers.stdout + volumes.stdout + networks.stdout).strip()


def remove_orphans() -> None:
    """Containers, pods, volumes and secrets named after a test process that is gone."""
    kinds = (  # (how to list them, how to remove one), pods before their containers
        (("pod", "ps", "--format", "{{.Name}}"), ("pod", "rm", "--force")),
        (("ps", "--all", "--format", "{{.Names}}"), ("rm", "--force")),
        (("volume", "ls", "--format", "{{.Name}}"), ("volume", "rm", "--force")),
        (("secret", "ls", "--format", "{{.Name}}"), ("secret", "rm")),
    )
    for listing, removal in kinds:
        for name in podman(*listing, check=False).stdout.split():
            pid = name.removeprefix("ferrymq-test-").partition("-")[0]
            gone = pid.isdigit() and not Path(f"/proc/{pid}").exists()
            if name.startswith("ferrymq-test-") and gone:
                podman(*removal, name, check=False)


def free_plan(directory: Path, nodes: int, groups: int = 1) -> ClusterPlan:
    """Ports the OS chose, let go just before the containers bind them."""
    plan = plan_cluster(str(directory), nodes, groups, auto_ports=True)
    for held in plan.holds.values():
        held.close()
    return plan


@pytest.fixture(scope="module")
def cluster(image, clean_host, tmp_path_factory) -> Iterator[Cluster]:
    directory = tmp_path_factory.mktemp("kube-play")
    plan = free_plan(directory / "plan", 3)
    manifest = directory / "cluster-3.yaml"
    documents = manifests.podman_documents(plan, image, prefix=PREFIX)
    manifest.write_text(manifests.dump(documents, "the test's cluster"))
    secrets = play.random_secrets()
    started = time.monotonic()
    played = play.up(manifest, secrets, timeout_s=READY_TIMEOUT_S)
    try:
        yield Cluster(played, plan, secrets, time.monotonic() - started)
    finally:
        assert play.down(played) == []


def master_and_slaves(cluster: Cluster) -> tuple[str, list[str]]:
    with Admin(cluster.played.grpc[0], security=cluster.played.security) as admin:
        (group,) = admin.cluster_status().broker_groups
    return group.master, sorted(n.id for n in cluster.plan.nodes if n.id != group.master)


def send(cluster: Cluster, endpoint: str, home: Path, bodies: list[str]) -> set[str]:
    """Send through the official client; the bodies it saw acknowledged."""
    events = run_official_at(
        endpoint,
        home,
        {
            "scenario": "produce",
            "topics": [TOPIC],
            "messages": [{"topic": TOPIC, "body": body} for body in bodies],
            **cluster.credentials(),
        },
        timeout_s=120,
    )
    return {e["body"] for e in events if e["event"] == "sent"}


def test_kill_9_of_the_master_and_its_restart_lose_no_acknowledged_message(cluster, tmp_path):
    print(f"cold start of the 3-node cluster: {cluster.cold_start_s:.1f} s")
    master, slaves = master_and_slaves(cluster)
    with Admin(cluster.address(master), security=cluster.played.security) as admin:
        admin.create_topic(TOPIC, queue_count=4)
    endpoint = cluster.address(slaves[0])  # the routes lead the client on to the master
    home = tmp_path / "client"
    acknowledged = send(cluster, endpoint, home, [f"before-{i}" for i in range(40)])
    assert len(acknowledged) == 40

    podman("kill", "--signal", "KILL", cluster.container(master))
    killed = podman("inspect", "--format", "{{.State.ExitCode}}", cluster.container(master))
    assert killed.stdout.strip() == "137"
    # Sent while the group elects a new master: some may fail, none acknowledged may go.
    acknowledged |= send(cluster, endpoint, home, [f"during-{i}" for i in range(40)])
    with Admin(endpoint, security=cluster.played.security) as admin:
        (group,) = admin.cluster_status().broker_groups
    assert group.master not in ("", master)  # the client's sends needed the failover

    podman("pod", "start", f"{PREFIX}-{master}")
    play.wait_ready(cluster.played, {n.id for n in cluster.plan.nodes}, READY_TIMEOUT_S)
    acknowledged |= send(cluster, endpoint, home, [f"after-{i}" for i in range(40)])

    events = run_official_at(
        cluster.address(master),  # the restarted node, back in the group
        home,
        {
            "scenario": "simple",
            "topic": TOPIC,
            "group": GROUP,
            "await_s": 2,
            "steps": [
                {
                    "do": "receive_until",
                    "count": len(acknowledged),
                    "deadline_s": 60,
                    "invisible_s": 60,
                    "ack": True,
                }
            ],
            **cluster.credentials(),
        },
        timeout_s=120,
    )
    received = {e["body"] for e in events if e["event"] == "received"}
    print(f"acknowledged {len(acknowledged)} of 120 sent, received {len(received)}")
    assert acknowledged - received == set(), "acknowledged messages lost"
    assert len([b for b in acknowledged if b.startswith("after-")]) == 40


def test_the_health_check_answers_and_sigterm_stops_a_node_cleanly(cluster):
    for node in cluster.plan.nodes:
        checked = podman("healthcheck", "run", cluster.container(node.id), check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    node = cluster.plan.nodes[-1].id
    started = time.monotonic()
    podman("pod", "stop", "--time", "30", f"{PREFIX}-{node}")
    stopped_s = time.monotonic() - started
    state = podman("inspect", "--format", "{{.State.ExitCode}}", cluster.container(node))
    assert state.stdout.strip() == "0"  # not 137: the node stopped on SIGTERM, not killed
    assert stopped_s < 25, stopped_s
    log = podman("logs", "--tail", "3", cluster.container(node))
    assert f"ferrymq node {node} stopped" in log.stdout + log.stderr
    podman("pod", "start", f"{PREFIX}-{node}")  # back from its volume
    play.wait_ready(cluster.played, {n.id for n in cluster.plan.nodes}, READY_TIMEOUT_S)


def test_a_second_broker_group_joins_the_running_cluster(cluster, image, tmp_path):
    """From 3 nodes to 6 as deploy/README.md says: group-2's pods played beside the running
    ones with the same node.toml, so the voters stay where they are (group-1)."""
    more = free_plan(tmp_path / "plan", 6, groups=2).nodes[3:]
    grown = replace(
        cluster.plan, nodes=cluster.plan.nodes + tuple(replace(n, voter=False) for n in more)
    )
    documents = manifests.podman_documents(grown, image, prefix=PREFIX)
    names = {f"{PREFIX}-{n.id}" for n in more}
    added = [d for d in documents if d["metadata"]["name"].removesuffix("-data") in names]
    manifest = tmp_path / "group-2.yaml"
    manifest.write_text(manifests.dump([documents[0], *added], "group-2 of the test's cluster"))
    played = next(yaml.safe_load_all(cluster.played.manifest.read_text()))
    assert documents[0] == played  # the same ConfigMap
    pods, claims, addresses = play.manifest_parts(manifest)
    group_2 = replace(
        cluster.played,
        pods=tuple(pods),
        # Not the ConfigMap's volume: group-1's pods still use it.
        volumes=tuple(v for v in claims if v.endswith("-data")),
        grpc=cluster.played.grpc + tuple(address for _, address in addresses),
    )
    try:
        podman("kube", "play", "--network", "host", str(manifest))
        play.wait_ready(group_2, {n.id for n in grown.nodes}, READY_TIMEOUT_S)
        with Admin(group_2.grpc[-1], security=cluster.played.security) as admin:
            admin.create_topic("container-group-2", queue_count=2, broker_groups=("group-2",))
            groups = {g.name: g for g in admin.cluster_status().broker_groups}
        assert set(groups) == {"group-1", "group-2"}
        assert groups["group-2"].master in {n.id for n in more}
        sent = run_official_at(
            group_2.grpc[0],
            tmp_path / "client",
            {
                "scenario": "produce",
                "topics": ["container-group-2"],
                "messages": [{"topic": "container-group-2", "body": "on-group-2"}],
                **cluster.credentials(),
            },
        )
        assert [e["body"] for e in sent if e["event"] == "sent"] == ["on-group-2"]
    finally:
        assert play.down(replace(group_2, secret="")) == []  # the secret: the fixture's


@pytest.fixture
def compose_tool() -> str:
    """podman-compose 1.0.6 from PyPI, beside this interpreter (``make test-image`` installs
    it): Debian bookworm's 1.0.3 puts a host-network service on a project network as well,
    which podman refuses ("cannot set multiple networks without bridge network mode")."""
    tool = Path(sys.executable).parent / "podman-compose"
    assert tool.exists(), f"no {tool}: make test-image installs podman-compose"
    return str(tool)


def test_the_compose_project_starts_the_same_cluster(image, clean_host, compose_tool, tmp_path):
    project = f"{PREFIX}-compose"
    plan = free_plan(tmp_path / "plan", 3)
    directory = tmp_path / "compose"
    directory.mkdir()
    (directory / "compose.yaml").write_text(yaml.safe_dump(manifests.compose_document(plan, image)))
    (directory / "node.toml").write_text(manifests.host_config(plan))
    secrets = play.random_secrets()
    (directory / "ferrymq.env").write_text(
        "".join(f"{option}={secrets[key]}\n" for key, option in SECRET_OPTIONS.items())
    )
    command = [compose_tool, "--project-name", project, "--file", str(directory / "compose.yaml")]
    played = play.PlayedCluster(
        directory / "compose.yaml",
        (),
        (),
        "",
        tuple(n.grpc for n in plan.nodes),
        ClientSecurity(access_key="admin", secret_key=secrets["admin-secret-key"]),
    )
    try:
        up = play.run_compose([*command, "up", "--detach"], directory)
        assert up.returncode == 0, up.stdout + up.stderr
        play.wait_ready(played, {n.id for n in plan.nodes}, READY_TIMEOUT_S)
        cluster = Cluster(played, plan, secrets, 0.0)
        with Admin(plan.nodes[0].grpc, security=played.security) as admin:
            admin.create_topic(TOPIC, queue_count=2)
        sent = send(cluster, plan.nodes[1].grpc, tmp_path / "client", ["composed-1", "composed-2"])
        assert sent == {"composed-1", "composed-2"}
    finally:
        down = play.run_compose([*command, "down", "--volumes"], directory)
        assert down.returncode == 0, down.stdout + down.stderr
