"""A network the chaos suite can cut: one Linux network namespace per node, joined by a
bridge in the host's namespace, where the suite's clients run.

Each node gets its own address, so a partition is a pair of blackhole routes: node A
drops every packet for B and B every packet for A (established connections stall, new
ones time out, exactly as on a cut cable). Cutting clients off a node blackholes the
bridge's own address inside the node's namespace, so the node's answers never reach
the host. ``heal`` deletes every route the suite added.

Needs root and iproute2 (``ip``); ``available()`` says whether this machine has both.
Names carry a random suffix, so concurrent runs never share a bridge or a namespace.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field


class NetworkError(RuntimeError):
    """The namespaces could not be set up or changed; the message says which command."""


def available() -> str | None:
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "partitions need root (network namespaces)"
    if shutil.which("ip") is None:
        return "partitions need iproute2's ip command"
    return None


def _ip(*args: str, netns: str = "") -> None:
    command = ["ip", *(["netns", "exec", netns, "ip"] if netns else []), *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise NetworkError(f"{' '.join(command)}: {done.stderr.strip()}")


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.64.0.0/10 that no route on this machine uses yet."""
    routes = subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True)
    taken = routes.stdout
    for _ in range(100):
        subnet = ipaddress.IPv4Network(
            f"10.{64 + secrets.randbelow(64)}.{secrets.randbelow(256)}.0/24"
        )
        if str(subnet) not in taken:
            return subnet
    raise NetworkError("no free 10.64.0.0/10 subnet for the chaos network")


@dataclass
class NodeNetwork:
    """The namespaces of one run. ``placements`` gives each node's (namespace, address)."""

    nodes: int
    suffix: str = field(default_factory=lambda: secrets.token_hex(2))
    subnet: ipaddress.IPv4Network = field(default_factory=_free_subnet)
    _cuts: set[tuple[str, str]] = field(default_factory=set)  # (namespace, address)
    _made: list[str] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"fmqbr{self.suffix}"

    @property
    def host_address(self) -> str:
        """The host's (the clients') address on the bridge."""
        return str(self.subnet.network_address + 254)

    def namespace(self, index: int) -> str:
        return f"fmq{self.suffix}n{index + 1}"

    def address(self, index: int) -> str:
        return str(self.subnet.network_address + index + 1)

    @property
    def placements(self) -> list[tuple[str, str]]:
        return [(self.namespace(i), self.address(i)) for i in range(self.nodes)]

    def create(self) -> NodeNetwork:
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made.append(self.bridge)
            _ip("addr", "add", f"{self.host_address}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i in range(self.nodes):
                namespace, outside, inside = self.namespace(i), f"fmq{self.suffix}v{i + 1}", "eth0"
                _ip("netns", "add", namespace)
                self._made.append(namespace)
                _ip(
                    "link",
                    "add",
                    outside,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    inside,
                    "netns",
                    namespace,
                )
                _ip("link", "set", outside, "master", self.bridge, "up")
                _ip("addr", "add", f"{self.address(i)}/24", "dev", inside, netns=namespace)
                _ip("link", "set", inside, "up", netns=namespace)
                _ip("link", "set", "lo", "up", netns=namespace)
        except BaseException:
            self.destroy()
            raise
        return self

    # ---- faults ------------------------------------------------------------------------
    def cut(self, a: int, b: int) -> None:
        """No packet between nodes ``a`` and ``b``, either way."""
        self._blackhole(self.namespace(a), self.address(b))
        self._blackhole(self.namespace(b), self.address(a))

    def isolate(self, node: int) -> None:
        """Node ``node`` cut from every other node (clients still reach everyone)."""
        for other in range(self.nodes):
            if other != node:
                self.cut(node, other)

    def cut_clients(self, node: int) -> None:
        """The host's clients cannot reach node ``node`` (its peers still can)."""
        self._blackhole(self.namespace(node), self.host_address)

    def heal(self) -> None:
        for namespace, address in sorted(self._cuts):
            _ip("route", "del", "blackhole", f"{address}/32", netns=namespace)
        self._cuts.clear()

    def _blackhole(self, namespace: str, address: str) -> None:
        if (namespace, address) not in self._cuts:
            _ip("route", "add", "blackhole", f"{address}/32", netns=namespace)
            self._cuts.add((namespace, address))

    # ---- teardown ----------------------------------------------------------------------
    def destroy(self) -> None:
        """Delete what ``create`` made (its veths go with their namespaces); never
        raises, so it is safe in a ``finally``."""
        for name in reversed(self._made):
            kind = ("link", "del") if name == self.bridge else ("netns", "del")
            subprocess.run(["ip", *kind, name], capture_output=True)
        self._made.clear()
        self._cuts.clear()
