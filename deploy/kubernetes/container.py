"""The ferrymq container as every manifest runs it: one definition, so that the pods
Kubernetes runs, the pods ``podman kube play`` runs and the compose services agree on the
command, the mounts, the secrets and the probes.

What differs per node comes from the environment (``FERRYMQ_<SECTION>__<OPTION>``,
node/config.py); the rest from the shared ``node.toml`` mounted at ``CONFIG_DIR``.
"""

from __future__ import annotations

CONFIG_DIR = "/etc/ferrymq"
CONFIG_FILE = f"{CONFIG_DIR}/node.toml"
DATA_DIR = "/var/lib/ferrymq"
USER_ID = 10001  # the image's ferrymq user (deploy/image/Containerfile)
SECRET_NAME = "ferrymq"
# Secret key → the option it sets. Never in a ConfigMap or a manifest's plain env.
SECRET_OPTIONS = {
    "cluster-secret": "FERRYMQ_CLUSTER__SECRET",
    "admin-secret-key": "FERRYMQ_SECURITY__ADMIN_SECRET_KEY",
    "metrics-token": "FERRYMQ_METRICS__BEARER_TOKEN",
}
HEALTH_CHECK = ["python", "-m", "ferrymq.launcher.health_check", "--config", CONFIG_FILE]
# (name, default port, option): the node's five ports (README, "Ports").
PORTS = (
    ("grpc", 8081, "grpc"),
    ("remoting", 10911, "remoting"),
    ("metrics", 5557, "metrics"),
    ("replication", 10912, "replication"),
    ("raft", 8876, "raft"),
)


def probes() -> dict:
    """Startup: up to 5 min to recover the log and join routing (a voter waits for a
    majority). Liveness: the node answers (a stuck node is restarted). Readiness: routing
    names it alive (until then it is left out of the client Service, not restarted)."""
    live = {"exec": {"command": HEALTH_CHECK}, "timeoutSeconds": 5}
    return {
        "startupProbe": {**live, "periodSeconds": 5, "failureThreshold": 60},
        "livenessProbe": {**live, "periodSeconds": 10, "failureThreshold": 3},
        "readinessProbe": {
            "exec": {"command": [*HEALTH_CHECK, "--ready"]},
            "timeoutSeconds": 5,
            "periodSeconds": 5,
            "failureThreshold": 2,
        },
    }


def secret_env(secret: str = SECRET_NAME) -> list[dict]:
    return [
        {"name": option, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        for key, option in SECRET_OPTIONS.items()
    ]


def container(image: str, env: list[dict], ports: bool, secret: str = SECRET_NAME) -> dict:
    """The container spec; ``ports``: declare the container ports (not with the host's
    network, where the node binds the host's ports itself)."""
    spec: dict = {
        "name": "ferrymq",
        "image": image,
        "args": ["--config", CONFIG_FILE],
        "env": env + secret_env(secret),
    }
    if ports:
        spec["ports"] = [
            {"name": name, "containerPort": port, "protocol": "TCP"} for name, port, _ in PORTS
        ]
    spec["volumeMounts"] = [
        {"name": "data", "mountPath": DATA_DIR},
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
    ]
    spec.update(probes())
    spec["securityContext"] = {
        "runAsNonRoot": True,
        "runAsUser": USER_ID,
        "runAsGroup": USER_ID,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    return spec
