"""Addresses for tests that start servers of their own: a port the OS has just handed out."""

from __future__ import annotations

import socket


def free_address(host: str = "127.0.0.1") -> str:
    """``host:port`` with a port the OS chose and released a moment ago, for a server (a
    Raft replica, say) that only takes its address as configuration."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return f"{host}:{probe.getsockname()[1]}"
