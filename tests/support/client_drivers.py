"""The official clients' drivers for ``bench.client_failover`` (which, as a benchmark, does
not import the tests): built on first use (``tests/support/clients.py``,
``tests/support/nodejs.py``) and written as JSON to a file the benchmark reads,
``{client: {"argv": [...], "env": {...}}}``.

    python -m tests.support.client_drivers <file> [java java4 go go4 alions nodejs]

``check_master_kill`` runs one drill of that benchmark as a test.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.client_failover import run_client
from tests.support import clients
from tests.support.cluster import SMALL_STORE
from tests.support.nodejs import RUNNER, nodejs_client

FAMILIES = {
    "java": "java-grpc",
    "java4": "java-remoting",
    "go": "go-grpc",
    "go4": "go-remoting",
    "alions": "alions",
}


def driver(client: str) -> dict:
    if client == "nodejs":
        return {
            "argv": ["node", str(RUNNER)],
            "env": {"ROCKETMQ_NODEJS_CLIENT": str(nodejs_client())},
        }
    return entry(clients.driver(FAMILIES[client]))


def entry(built: clients.Driver) -> dict:
    """A built driver as the benchmark's ``--drivers`` file holds it."""
    return {"argv": list(built.argv), "env": dict(built.env)}


# The longest a master's kill may leave a client's sends or receives down in a test: a 5.x
# client's routes name every node, so it resumes at once (a third of a second on a quiet
# host, bench/RESULTS.md); a 4.x-protocol client at its next route poll, up to 30 s after
# the kill, plus the retries of the send in flight.
RESUMED_WITHIN_MS = {"go": 10_000, "go4": 45_000, "alions": 45_000}


def check_master_kill(client: str, root: Path) -> None:
    """One drill of ``bench.client_failover`` for ``client`` (a fresh 3-node SYNC cluster, the
    master killed with SIGKILL under the client's load): nothing acknowledged is lost, and
    sends and receives are back within the client's bound. The benchmark behind
    docs/guarantees.md's per-client table is what runs."""
    drivers = {client: entry(clients.required(FAMILIES[client]))}
    figures = run_client(client, 1, str(root), drivers, SMALL_STORE["store"])
    print(figures)
    assert figures[f"{client}_failover_acknowledged"] > 0, figures
    assert figures[f"{client}_failover_lost"] == 0, figures
    bound = RESUMED_WITHIN_MS[client]
    assert figures[f"{client}_failover_unavailable_ms_max"] < bound, figures


def main(path: str, names: list[str]) -> None:
    drivers = {name: driver(name) for name in names or [*FAMILIES, "nodejs"]}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(drivers, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
