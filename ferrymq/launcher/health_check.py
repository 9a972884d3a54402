"""A node's health as a container runtime or Kubernetes asks for it: an exit code.

``python -m ferrymq.launcher.health_check --config node.toml [--ready]`` reads the node's
configuration as the node does (the file, then ``FERRYMQ_<SECTION>__<OPTION>`` variables)
and calls its client port:

- live (the default): the node answers ClusterStatus within the timeout. A node that
  cannot answer is stuck or gone, and restarting it is the cure.
- ``--ready``: also, routing has a leader and names this node alive. Until then clients
  sent to it would be turned away, but restarting it would not help: a readiness probe,
  not a liveness one.

Exit 0 when healthy, 1 with one line on stderr saying why not, 2 for a bad configuration.
"""

from __future__ import annotations

import argparse
import sys

from ferrymq.client import Admin, ClientSecurity, FerryError
from node.config import WILDCARD_HOSTS, ConfigError, NodeConfig, load_node_config

TIMEOUT_S = 3.0


def client_security(config: NodeConfig) -> ClientSecurity:
    """Sign as the configured admin when calls need a signature; TLS when the client port
    speaks nothing else, trusting the node's CA (else its own certificate)."""
    security = config.security
    tls_ca = ""
    if security.client_tls_mode == "required":
        tls_ca = security.tls_ca or security.tls_client_ca or security.tls_cert
    return ClientSecurity(
        access_key=security.admin_access_key if security.auth else "",
        secret_key=security.admin_secret_key if security.auth else "",
        tls_ca=tls_ca,
    )


def check(config: NodeConfig, ready: bool, timeout_s: float = TIMEOUT_S) -> str:
    """ "" when healthy, else why not."""
    host = "127.0.0.1" if config.host in WILDCARD_HOSTS else config.host
    address = f"{host}:{config.ports.grpc}"
    try:
        with Admin(address, timeout_s=timeout_s, security=client_security(config)) as admin:
            status = admin.cluster_status()
    except FerryError as error:
        return f"{config.id} at {address} does not answer: {error}"
    if not ready:
        return ""
    if not status.raft_leader:
        return f"{config.id}: routing has no leader"
    if not any(n.id == config.id and n.alive for n in status.nodes):
        return f"{config.id}: not registered alive with routing yet"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ferrymq.launcher.health_check")
    parser.add_argument("--config", help="the node's node.toml")
    parser.add_argument("--ready", action="store_true", help="ready for clients, not only live")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds")
    args = parser.parse_args(argv)
    try:
        config = load_node_config(args.config)
    except (ConfigError, OSError) as error:
        print(f"health check: {error}", file=sys.stderr)
        return 2
    problem = check(config, args.ready, args.timeout)
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
