"""The deployment manifests (deploy/kubernetes/, deploy/compose/) are what their generator
writes, and every node they describe gets a valid configuration: the shared node.toml with
the pod's environment, as the node reads it. Their check against the Kubernetes API types is
tests/deploy/test_kubernetes_api_types.py (``make test-image``)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml

from deploy.kubernetes import manifests
from deploy.kubernetes.container import SECRET_OPTIONS
from ferrymq.launcher import await_name
from node.config import NodeConfig, parse_node_config

ROOT = Path(__file__).resolve().parent.parent.parent
SECRETS = {key: f"test-{key}-0123456789abcdef" for key in SECRET_OPTIONS}


def documents(path: Path) -> list[dict]:
    return list(yaml.safe_load_all(path.read_text()))


def pod_config(node_toml: str, env: list[dict], pod: str, pod_ip: str) -> NodeConfig:
    """What the node in ``pod`` reads: the downward API's values and the Secret's in the
    environment, ``$(VAR)`` expanded as Kubernetes does."""
    values: dict[str, str] = {}
    for variable in env:
        if "value" in variable:
            text = variable["value"]
            values[variable["name"]] = re.sub(r"\$\((\w+)\)", lambda m: values[m[1]], text)
        elif "fieldRef" in variable["valueFrom"]:
            path = variable["valueFrom"]["fieldRef"]["fieldPath"]
            values[variable["name"]] = {"metadata.name": pod, "status.podIP": pod_ip}[path]
        else:
            values[variable["name"]] = SECRETS[variable["valueFrom"]["secretKeyRef"]["key"]]
    return parse_node_config(node_toml, values)


def test_the_manifests_are_what_the_generator_writes():
    assert manifests.main(["--check"]) == 0


@pytest.mark.parametrize("size", [3, 6])
def test_every_pod_of_the_kubernetes_manifests_gets_a_valid_configuration(size):
    found = documents(ROOT / "deploy" / "kubernetes" / f"cluster-{size}.yaml")
    by_kind: dict[str, list[dict]] = {}
    for document in found:
        by_kind.setdefault(document["kind"], []).append(document)
    node_toml = by_kind["ConfigMap"][0]["data"]["node.toml"]
    headless = next(s for s in by_kind["Service"] if s["spec"].get("clusterIP") == "None")
    assert headless["spec"]["publishNotReadyAddresses"] is True
    assert set(by_kind["Secret"][0]["stringData"]) == set(SECRETS)
    configs = []
    for statefulset in by_kind["StatefulSet"]:
        spec = statefulset["spec"]
        assert spec["serviceName"] == headless["metadata"]["name"]
        assert spec["selector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
        container = spec["template"]["spec"]["containers"][0]
        assert {"startupProbe", "livenessProbe", "readinessProbe"} <= set(container)
        for ordinal in range(spec["replicas"]):
            pod = f"{statefulset['metadata']['name']}-{ordinal}"
            configs.append(pod_config(node_toml, container["env"], pod, f"10.0.0.{len(configs)}"))
    assert len(configs) == size
    assert len({c.id for c in configs}) == size
    voters = [c for c in configs if c.is_voter]
    # deploy/cluster-3: all three vote; deploy/cluster-6: nodes 1, 2 and 4.
    expected = {3: [0, 1, 2], 6: [0, 1, 3]}[size]
    assert [configs.index(v) for v in voters] == expected
    assert set(voters[0].cluster.voters) == {v.raft_address for v in voters}
    assert {c.group for c in configs} == {f"group-{g + 1}" for g in range(size // 3)}
    assert all(c.cluster.secret == SECRETS["cluster-secret"] and c.security.auth for c in configs)
    budget = by_kind["PodDisruptionBudget"][0]["spec"]
    assert budget["maxUnavailable"] == 1
    for statefulset in by_kind["StatefulSet"]:
        labels = statefulset["spec"]["template"]["metadata"]["labels"]
        assert budget["selector"]["matchLabels"].items() <= labels.items()


@pytest.mark.parametrize("size", [3, 6])
def test_the_one_host_variants_give_each_node_its_own_loopback_ports(size):
    """podman kube play's pods and the compose services: the same nodes, ports and voters."""
    played = documents(ROOT / "deploy" / "kubernetes" / "podman" / f"cluster-{size}.yaml")
    assert {d["kind"] for d in played} == {"ConfigMap", "PersistentVolumeClaim", "Pod"}
    node_toml = played[0]["data"]["node.toml"]
    pods = [d for d in played if d["kind"] == "Pod"]
    configs = [
        pod_config(node_toml, p["spec"]["containers"][0]["env"], p["metadata"]["name"], "")
        for p in pods
    ]
    assert all(p["spec"]["hostNetwork"] for p in pods)
    compose_dir = ROOT / "deploy" / "compose" / f"cluster-{size}"
    services = yaml.safe_load((compose_dir / "compose.yaml").read_text())["services"]
    secrets_env = dict(
        line.split("=", 1) for line in (compose_dir / "ferrymq.env.example").read_text().split()
    )
    assert set(secrets_env) == set(SECRET_OPTIONS.values())
    composed = [
        parse_node_config(
            (compose_dir / "node.toml").read_text(),
            {**service["environment"], **{k: f"{k}-0123456789abcdef" for k in secrets_env}},
        )
        for service in services.values()
    ]
    for variant in (configs, composed):
        assert [c.id for c in variant] == [f"node-{i + 1}" for i in range(size)]
        ports = [p for c in variant for p in vars(c.ports).values()]
        assert len(set(ports)) == len(ports)  # every node on its own ports
        assert all(c.host == "127.0.0.1" for c in variant)
        assert len([c for c in variant if c.is_voter]) == 3
    assert [vars(c.ports) for c in configs] == [vars(c.ports) for c in composed]


def test_the_init_container_waits_for_a_name_to_resolve():
    """deploy/kubernetes's init container: a name that resolves, at once; one that never
    does, not before the timeout."""
    assert await_name.main(["localhost", "--timeout", "5"]) == 0
    started = time.monotonic()
    assert await_name.main(["no-such-pod.ferrymq.invalid", "--timeout", "1"]) == 1
    assert time.monotonic() - started >= 1  # (a slow resolver may add its own timeouts)
