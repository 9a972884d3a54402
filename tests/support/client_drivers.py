"""The official clients' drivers for ``bench.client_failover`` (which, as a benchmark, does
not import the tests): built on first use (``tests/support/clients.py``,
``tests/support/nodejs.py``) and written as JSON to a file the benchmark reads,
``{client: {"argv": [...], "env": {...}}}``.

    python -m tests.support.client_drivers <file> [java java4 go go4 alions nodejs]
"""

from __future__ import annotations

import json
import sys

from tests.support import clients
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
    built = clients.driver(FAMILIES[client])
    return {"argv": list(built.argv), "env": dict(built.env)}


def main(path: str, names: list[str]) -> None:
    drivers = {name: driver(name) for name in names or [*FAMILIES, "nodejs"]}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(drivers, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
