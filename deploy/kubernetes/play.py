"""A cluster on one machine from the kube-play manifests (``podman kube play --network
host``), and its removal: what ``deploy/kubernetes/podman/cluster-N.yaml`` needs besides the
file.

podman 4.3 turns a manifest's Secret document into a podman secret that its own
``secretKeyRef`` cannot read (it wants a JSON map of base64 values), so ``up`` makes the
secret in that form first, with new random values, then plays the file and waits until
routing names every node alive with every broker group in sync. ``down`` removes the pods,
the volumes (every message with them) and the secret.

``python -m deploy.kubernetes.play up --nodes 3`` prints the nodes' client addresses and
the admin credentials as JSON; ``python -m deploy.kubernetes.play down --nodes 3``.
"""

from __future__ import annotations

import argparse
import base64
import json
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from deploy.image.podman import PodmanError, ensure_tools, environment, podman
from deploy.kubernetes.container import SECRET_OPTIONS
from ferrymq.client import Admin, ClientSecurity, FerryError

ROOT = Path(__file__).resolve().parent.parent.parent
READY_TIMEOUT_S = 180.0
ADMIN_ACCESS_KEY = "admin"  # deploy/kubernetes/manifests.py's node.toml


@dataclass(frozen=True)
class PlayedCluster:
    """What ``up`` started: the manifest, its pods, volumes and secret, and how to call it."""

    manifest: Path
    pods: tuple[str, ...]
    volumes: tuple[str, ...]
    secret: str
    grpc: tuple[str, ...]  # every node's client address, host:port
    security: ClientSecurity


def random_secrets() -> dict[str, str]:
    return {key: secrets.token_hex(24) for key in SECRET_OPTIONS}


def secret_payload(values: dict[str, str]) -> bytes:
    """The podman secret kube play's ``secretKeyRef`` reads: key → base64 of the value."""
    return json.dumps(
        {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
    ).encode()


def manifest_parts(manifest: Path) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """The manifest's pods, volumes (its claims, and its ConfigMaps, which kube play
    keeps as volumes) and each pod's client address (from its env)."""
    pods, volumes, addresses = [], [], []
    for document in yaml.safe_load_all(manifest.read_text()):
        if document["kind"] in ("PersistentVolumeClaim", "ConfigMap"):
            volumes.append(document["metadata"]["name"])
        if document["kind"] == "Pod":
            pods.append(document["metadata"]["name"])
            env = {e["name"]: e.get("value") for e in document["spec"]["containers"][0]["env"]}
            address = f"{env['FERRYMQ_NODE__HOST']}:{env['FERRYMQ_PORTS__GRPC']}"
            addresses.append((env["FERRYMQ_NODE__ID"], address))
    return pods, volumes, addresses


def secret_of(manifest: Path) -> str:
    for document in yaml.safe_load_all(manifest.read_text()):
        if document["kind"] == "Pod":
            for env in document["spec"]["containers"][0]["env"]:
                if "valueFrom" in env:
                    return env["valueFrom"]["secretKeyRef"]["name"]
    raise PodmanError(f"{manifest} names no secret")


def up(manifest: Path, values: dict[str, str], timeout_s: float = READY_TIMEOUT_S) -> PlayedCluster:
    """Make the secret, play ``manifest``, wait until the cluster is ready."""
    ensure_tools()
    secret = secret_of(manifest)
    pods, volumes, addresses = manifest_parts(manifest)
    security = ClientSecurity(access_key=ADMIN_ACCESS_KEY, secret_key=values["admin-secret-key"])
    played = PlayedCluster(
        manifest, tuple(pods), tuple(volumes), secret, tuple(a for _, a in addresses), security
    )
    with tempfile.NamedTemporaryFile(prefix="ferrymq-secret-") as payload:
        payload.write(secret_payload(values))
        payload.flush()
        podman("secret", "create", secret, payload.name)
    try:
        podman("kube", "play", "--network", "host", str(manifest))
        wait_ready(played, {node for node, _ in addresses}, timeout_s)
    except BaseException:
        down(played)
        raise
    return played


def wait_ready(played: PlayedCluster, expected: set[str], timeout_s: float) -> None:
    """Until a node's ClusterStatus names every node alive, a Raft leader, and every
    broker group with a master and all its members in sync."""
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    while time.monotonic() < deadline:
        for address in played.grpc:
            try:
                with Admin(address, timeout_s=2, security=played.security) as admin:
                    status = admin.cluster_status()
            except FerryError as error:
                last = f"{address}: {error}"
                continue
            alive = {n.id for n in status.nodes if n.alive}
            members = {
                g.name: {n.id for n in status.nodes if n.broker_group == g.name}
                for g in status.broker_groups
            }
            in_sync = status.broker_groups and all(
                g.master and set(g.in_sync) == members[g.name] for g in status.broker_groups
            )
            if expected <= alive and status.raft_leader and in_sync:
                return
            last = f"{address}: alive {sorted(alive)}, leader {status.raft_leader!r}"
        time.sleep(0.2)
    raise PodmanError(f"cluster not ready after {timeout_s:.0f} s ({last}); {logs(played.pods)}")


def logs(pods: Iterable[str], lines: int = 20) -> str:
    found = []
    for pod in pods:
        done = podman("logs", "--tail", str(lines), f"{pod}-ferrymq", check=False)
        found.append(f"--- {pod}:\n{done.stdout}{done.stderr}")
    return "\n".join(found)


def down(played: PlayedCluster) -> list[str]:
    """Remove the pods, their volumes and the secret (none when ``secret`` is ""); what
    could not be removed."""
    left = []
    for pod in played.pods:
        podman("pod", "rm", "--force", "--time", "10", pod, check=False)
        if podman("pod", "exists", pod, check=False).returncode == 0:
            left.append(f"pod {pod}")
    for volume in played.volumes:
        podman("volume", "rm", "--force", volume, check=False)
        if podman("volume", "exists", volume, check=False).returncode == 0:
            left.append(f"volume {volume}")
    if played.secret:
        podman("secret", "rm", played.secret, check=False)
    return left


def run_compose(argv: list[str], directory: Path) -> subprocess.CompletedProcess:
    """A compose tool (podman-compose) with podman's configuration, in ``directory``."""
    return subprocess.run(
        argv, cwd=directory, env=environment(), capture_output=True, text=True, timeout=600
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.kubernetes.play")
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("--nodes", type=int, choices=(3, 6), default=3)
    args = parser.parse_args(argv)
    manifest = ROOT / "deploy" / "kubernetes" / "podman" / f"cluster-{args.nodes}.yaml"
    try:
        if args.action == "up":
            values = random_secrets()
            played = up(manifest, values)
            print(
                json.dumps(
                    {
                        "grpc": list(played.grpc),
                        "access_key": ADMIN_ACCESS_KEY,
                        "secret_key": values["admin-secret-key"],
                    }
                )
            )
        else:
            pods, volumes, addresses = manifest_parts(manifest)
            played = PlayedCluster(
                manifest,
                tuple(pods),
                tuple(volumes),
                secret_of(manifest),
                tuple(a for _, a in addresses),
                ClientSecurity(),
            )
            left = down(played)
            if left:
                print(f"left behind: {left}", file=sys.stderr)
                return 1
    except PodmanError as error:
        print(f"deploy.kubernetes.play: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
