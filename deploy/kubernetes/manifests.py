"""Writes ferrymq's deployment manifests, all from one container definition
(``deploy/kubernetes/container.py``), for the layouts of deploy/cluster-3 and cluster-6:

- ``deploy/kubernetes/cluster-{3,6}.yaml``: Kubernetes. A StatefulSet per broker group (stable
  pod names ``ferrymq-g<group>-<i>``, a volume each), a headless Service that gives every
  pod a stable DNS name for Raft and replication, a client Service, the shared
  ``node.toml`` as a ConfigMap, the secrets as a Secret, probes, a PodDisruptionBudget.
- ``deploy/kubernetes/podman/cluster-{3,6}.yaml``: the same topology for ``podman kube play
  --network host`` on one machine: a Pod per node on the host's loopback, each on its own
  ports, its volume a PersistentVolumeClaim.
- ``deploy/compose/cluster-{3,6}/``: the same as a compose project.

``python -m deploy.kubernetes.manifests`` rewrites them (``--check``: fails when one is out
of date; tests/deploy/test_kubernetes_manifests.py runs it). The host-network variants use
the ports ``ferrymq cluster up`` gives node *i* (8081 + *i*, ...); tests render them with
ports the OS chose.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from deploy.kubernetes.container import (
    CONFIG_FILE,
    DATA_DIR,
    HEALTH_CHECK,
    PORTS,
    SECRET_NAME,
    SECRET_OPTIONS,
    USER_ID,
    container,
)
from ferrymq.launcher.cluster import ClusterPlan, NodePlan, plan_cluster, voter_indexes

ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_IMAGE = "localhost/ferrymq:dev"
APP = {"app.kubernetes.io/name": "ferrymq"}
GROUP_LABEL = "ferrymq.dev/broker-group"
HEADLESS = "ferrymq"  # the StatefulSets' serviceName: pod DNS is <pod>.ferrymq
# Kubernetes kinds podman 4.3's ``kube play`` (Debian bookworm) does not run. Its Secret
# documents become podman secrets that its own secretKeyRef then cannot read (it wants a
# JSON map of base64 values): ``deploy.kubernetes.play`` creates the secret that way.
NOT_PLAYED = ("StatefulSet", "Service", "PodDisruptionBudget", "Secret")


@dataclass(frozen=True)
class Topology:
    """Nodes in equal broker groups; 3 Raft voters spread over the groups, as
    ``ferrymq cluster up`` chooses them (6 nodes: nodes 1, 2 and 4)."""

    nodes: int
    groups: int

    @property
    def per_group(self) -> int:
        return self.nodes // self.groups

    def pod_name(self, index: int) -> str:
        return f"ferrymq-g{index // self.per_group + 1}-{index % self.per_group}"

    def voters(self) -> list[int]:
        return voter_indexes(self.nodes, self.groups, 3)


LAYOUTS = {3: Topology(3, 1), 6: Topology(6, 2)}


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def node_toml(header: str, sections: dict[str, dict]) -> str:
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for section, options in sections.items():
        lines += ["", f"[{section}]"]
        lines += [f"{key} = {toml_value(value)}" for key, value in options.items()]
    return "\n".join(lines) + "\n"


SHARED_HEADER = """\
ferrymq node.toml shared by every node of the cluster. What differs per node (id,
group, addresses, ports) and the secrets come from the environment the manifest sets
(FERRYMQ_<SECTION>__<OPTION>, which wins over this file: node/config.py)."""


# ---- Kubernetes ---------------------------------------------------------------------------
def kubernetes_config(topology: Topology) -> str:
    voters = [f"{topology.pod_name(i)}.{HEADLESS}:8876" for i in topology.voters()]
    return node_toml(
        SHARED_HEADER,
        {
            "node": {"data_dir": DATA_DIR},
            "ports": {option: port for _, port, option in PORTS},
            "cluster": {
                "voters": voters,
                "lease_ms": 3000,
                "heartbeat_interval_ms": 1000,
                # Pods start in parallel, and an image pull or a volume attach can keep
                # a voter's peers away for minutes: wait, rather than restart in a loop.
                "join_timeout_ms": 300_000,
            },
            "security": {"auth": True, "admin_access_key": "admin"},
            "store": {"flush_mode": "SYNC_FLUSH"},
        },
    )


def kubernetes_pod_env(group: int) -> list[dict]:
    """Each pod's own options, from the downward API: its name is the node id and, under
    the headless Service, the stable address peers dial; its IP is what clients reach."""
    return [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "FERRYMQ_NODE__ID", "value": "$(POD_NAME)"},
        {"name": "FERRYMQ_NODE__GROUP", "value": f"group-{group}"},
        {"name": "FERRYMQ_NODE__HOST", "value": "$(POD_IP)"},
        {"name": "FERRYMQ_NODE__INTERNAL_HOST", "value": f"$(POD_NAME).{HEADLESS}"},
        {"name": "FERRYMQ_METRICS__HOST", "value": "$(POD_IP)"},
    ]


def kubernetes_documents(topology: Topology, image: str) -> list[dict]:
    documents: list[dict] = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET_NAME, "labels": APP},
            "type": "Opaque",
            # Replace each (e.g. `openssl rand -hex 32`): a node refuses the placeholders.
            "stringData": {key: f"CHANGE-ME-{key}" for key in SECRET_OPTIONS},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "ferrymq-config", "labels": APP},
            "data": {"node.toml": kubernetes_config(topology)},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": HEADLESS, "labels": APP},
            "spec": {
                "clusterIP": "None",
                # Peers must find each other before any is ready: Raft needs a majority
                # of voters to elect the leader that readiness waits for.
                "publishNotReadyAddresses": True,
                "selector": APP,
                "ports": [{"name": name, "port": port} for name, port, _ in PORTS],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "ferrymq-client", "labels": APP},
            "spec": {
                "selector": APP,
                "ports": [
                    {"name": name, "port": port, "targetPort": name}
                    for name, port, _ in PORTS
                    if name in ("grpc", "remoting")
                ],
            },
        },
    ]
    for group in range(1, topology.groups + 1):
        labels = {**APP, GROUP_LABEL: f"group-{group}"}
        documents.append(
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": f"ferrymq-g{group}", "labels": labels},
                "spec": {
                    "serviceName": HEADLESS,
                    "replicas": topology.per_group,
                    # Every pod at once: a voter waits for the others to elect a leader.
                    "podManagementPolicy": "Parallel",
                    "updateStrategy": {"type": "RollingUpdate"},
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "terminationGracePeriodSeconds": 60,
                            "securityContext": {"fsGroup": USER_ID},
                            "affinity": one_pod_per_machine(),
                            "initContainers": [await_own_name(image)],
                            "containers": [
                                {
                                    **container(image, kubernetes_pod_env(group), ports=True),
                                    "resources": {
                                        "requests": {"cpu": "1", "memory": "2Gi"},
                                        "limits": {"memory": "4Gi"},
                                    },
                                }
                            ],
                            "volumes": [
                                {"name": "config", "configMap": {"name": "ferrymq-config"}}
                            ],
                        },
                    },
                    "volumeClaimTemplates": [
                        {
                            "metadata": {"name": "data", "labels": labels},
                            "spec": {
                                "accessModes": ["ReadWriteOnce"],
                                "resources": {"requests": {"storage": "50Gi"}},
                            },
                        }
                    ],
                },
            }
        )
    documents.append(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "ferrymq", "labels": APP},
            # One node of the whole cluster at a time: two of a group would leave its
            # master without an in-sync slave, and two voters the routing without a
            # majority (6 nodes: voters sit in both groups).
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": APP}},
        }
    )
    return documents


def await_own_name(image: str) -> dict:
    """The pod's DNS name resolves before the node binds Raft on it
    (``ferrymq/launcher/await_name.py``)."""
    pod_name = {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    return {
        "name": "await-dns",
        "image": image,
        "command": ["python", "-m", "ferrymq.launcher.await_name", f"$(POD_NAME).{HEADLESS}"],
        "env": [pod_name],
        "securityContext": container(image, [], ports=False)["securityContext"],
    }


def one_pod_per_machine() -> dict:
    """Replicas of a group on different machines, when the scheduler can."""
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": APP},
                    },
                }
            ]
        }
    }


# ---- one host: podman kube play and compose -------------------------------------------------
def host_plan(topology: Topology) -> ClusterPlan:
    """``ferrymq cluster up``'s plan: node-1..N on 127.0.0.1, node *i* on 8081 + *i*, ..."""
    return plan_cluster("cluster", topology.nodes, topology.groups)


# On one machine the nodes dial each other's Raft and replication ports by a name, as the
# pods of the Kubernetes manifests do by their DNS names: the same path through name
# resolution (pysyncobj binds and dials names; so do replication's links).
HOST_PEER_NAME = "localhost"


def host_config(plan: ClusterPlan) -> str:
    store = dict(plan.settings.get("store", {}))
    voters = [f"{HOST_PEER_NAME}:{voter.rpartition(':')[2]}" for voter in plan.voters]
    return node_toml(
        SHARED_HEADER
        + "\nOne machine's cluster on its loopback: smaller files than deploy/cluster-N.",
        {
            "node": {"data_dir": DATA_DIR},
            "cluster": {"voters": voters, "lease_ms": 3000, "heartbeat_interval_ms": 1000},
            "security": {"auth": True, "admin_access_key": "admin"},
            "store": {"flush_mode": "SYNC_FLUSH", **store},
        },
    )


def host_env(node: NodePlan) -> dict[str, str]:
    """One node's own options on the host's network: its id, group, ports and address."""
    host = node.grpc.rpartition(":")[0]
    env = {
        "FERRYMQ_NODE__ID": node.id,
        "FERRYMQ_NODE__GROUP": node.group,
        "FERRYMQ_NODE__HOST": host,
        "FERRYMQ_NODE__INTERNAL_HOST": HOST_PEER_NAME,
        "FERRYMQ_METRICS__HOST": host,
    }
    addresses = {"grpc": node.grpc, "remoting": node.remoting, "metrics": node.metrics}
    addresses |= {"replication": node.ha, "raft": node.raft}
    for _, _, option in PORTS:
        env[f"FERRYMQ_PORTS__{option.upper()}"] = addresses[option].rpartition(":")[2]
    return env


def podman_documents(plan: ClusterPlan, image: str, prefix: str = "ferrymq") -> list[dict]:
    """ConfigMap, a PersistentVolumeClaim and a Pod per node, for ``podman kube play
    --network host``; the secret is ``prefix`` (``deploy.kubernetes.play``)."""
    documents: list[dict] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{prefix}-config"},
            "data": {"node.toml": host_config(plan)},
        }
    ]
    for node in plan.nodes:
        name = f"{prefix}-{node.id}"
        env = [{"name": k, "value": v} for k, v in host_env(node).items()]
        documents.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": f"{name}-data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "10Gi"}},
                },
            }
        )
        documents.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "labels": {**APP, GROUP_LABEL: node.group}},
                "spec": {
                    "hostNetwork": True,
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": 60,
                    "containers": [container(image, env, ports=False, secret=prefix)],
                    "volumes": [
                        {"name": "data", "persistentVolumeClaim": {"claimName": f"{name}-data"}},
                        {"name": "config", "configMap": {"name": f"{prefix}-config"}},
                    ],
                },
            }
        )
    return documents


def compose_document(plan: ClusterPlan, image: str) -> dict:
    """A compose project of the same nodes (podman-compose, docker compose): host network,
    ``node.toml`` beside the file, the secrets in ``ferrymq.env`` (not in the file)."""
    services = {}
    for node in plan.nodes:
        services[node.id] = {
            "image": image,
            "command": ["--config", CONFIG_FILE],
            "network_mode": "host",
            "read_only": True,
            "restart": "unless-stopped",
            "stop_grace_period": "60s",
            "environment": host_env(node),
            "env_file": ["ferrymq.env"],
            "volumes": [f"{node.id}-data:{DATA_DIR}", f"./node.toml:{CONFIG_FILE}:ro"],
            "healthcheck": {
                "test": ["CMD", *HEALTH_CHECK],
                "interval": "10s",
                "timeout": "5s",
                "retries": 3,
                "start_period": "60s",
            },
        }
    return {"services": services, "volumes": {f"{n.id}-data": {} for n in plan.nodes}}


COMPOSE_ENV_EXAMPLE = "".join(
    f"{option}=CHANGE-ME-{key}\n" for key, option in SECRET_OPTIONS.items()
)


# ---- files ---------------------------------------------------------------------------------
class _Dumper(yaml.SafeDumper):
    """Block style, text as literal blocks, no anchors: written for people to read."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def dump(documents: list[dict], header: str) -> str:
    comment = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    body = "---\n".join(
        yaml.dump(d, Dumper=_Dumper, sort_keys=False, width=100, default_flow_style=False)
        for d in documents
    )
    return comment + body


def kubernetes_header(topology: Topology) -> str:
    groups = "one broker group of three, all three Raft voters."
    if topology.groups == 2:
        groups = (
            "broker groups group-1 (pods ferrymq-g1-*)\nand group-2 (ferrymq-g2-*), "
            "Raft voters ferrymq-g1-0, ferrymq-g1-1 and ferrymq-g2-0\n(deploy/cluster-6's "
            "nodes 1, 2 and 4)."
        )
    kinds = ", ".join(sorted({d["kind"] for d in kubernetes_documents(topology, "")}))
    return f"""\
ferrymq: a {topology.nodes}-node cluster on Kubernetes, {groups}
Generated by `python -m deploy.kubernetes.manifests`; deploy/README.md says how to deploy:
set the Secret's values and the image (`make image`, pushed where the cluster pulls from),
then `kubectl apply -n NAMESPACE -f cluster-{topology.nodes}.yaml`.
Kinds: {kinds}.
podman kube play (4.3) runs none of {", ".join(NOT_PLAYED)}:
podman/cluster-{topology.nodes}.yaml is this topology as kube play runs it."""


def podman_header(topology: Topology) -> str:
    return f"""\
ferrymq: a {topology.nodes}-node cluster for `podman kube play --network host` on one machine.
Generated by `python -m deploy.kubernetes.manifests`. Kinds: ConfigMap,
PersistentVolumeClaim, Pod: kube play runs no StatefulSet, Service or PodDisruptionBudget
(../cluster-{topology.nodes}.yaml has them), and its Secret documents are not readable by
secretKeyRef, so the secret "ferrymq" is made first: `python -m deploy.kubernetes.play up
--nodes {topology.nodes}` does both (deploy/README.md)."""


def rendered_files(image: str = DEFAULT_IMAGE) -> dict[Path, str]:
    files: dict[Path, str] = {}
    for size, topology in LAYOUTS.items():
        files[ROOT / "deploy" / "kubernetes" / f"cluster-{size}.yaml"] = dump(
            kubernetes_documents(topology, image), kubernetes_header(topology)
        )
        plan = host_plan(topology)
        files[ROOT / "deploy" / "kubernetes" / "podman" / f"cluster-{size}.yaml"] = dump(
            podman_documents(plan, image), podman_header(topology)
        )
        compose = ROOT / "deploy" / "compose" / f"cluster-{size}"
        files[compose / "compose.yaml"] = dump(
            [compose_document(plan, image)],
            f"ferrymq: a {size}-node cluster as a compose project on one machine's loopback.\n"
            "Generated by `python -m deploy.kubernetes.manifests`. Copy ferrymq.env.example\n"
            "to ferrymq.env and set its secrets, then: podman-compose up -d",
        )
        files[compose / "node.toml"] = host_config(plan)
        files[compose / "ferrymq.env.example"] = COMPOSE_ENV_EXAMPLE
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.kubernetes.manifests")
    parser.add_argument("--check", action="store_true", help="fail if a file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, text in rendered_files().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(str(path.relative_to(ROOT)))
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if args.check and stale:
        print(f"out of date (python -m deploy.kubernetes.manifests): {stale}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
