"""Wait until a host name resolves: a Kubernetes init container's job before a node starts.

A pod's DNS name under its headless Service (``<pod>.<service>``) is published shortly after
the pod gets its IP, and may not resolve yet when its containers start. The node binds Raft
on that name (``node.internal_host``), and pysyncobj cannot bind a name that does not
resolve: the node would exit and be restarted with a growing back-off. Waiting here costs
the pod a second, not minutes.

``python -m ferrymq.launcher.await_name NAME [--timeout S]``: exit 0 once NAME resolves, 1
after the timeout (the pod then restarts the wait).
"""

from __future__ import annotations

import argparse
import socket
import sys
import time

TIMEOUT_S = 300.0
POLL_S = 0.5


def await_name(name: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.getaddrinfo(name, None)
            return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
        time.sleep(POLL_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ferrymq.launcher.await_name")
    parser.add_argument("name")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds")
    args = parser.parse_args(argv)
    if await_name(args.name, args.timeout):
        return 0
    print(f"{args.name} does not resolve after {args.timeout:.0f} s", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
