"""Running podman on a machine of this kind, the one way the image build and the container
tests do it (deploy/README.md, "Containers").

- The tools come from Debian's packages (``apt-get``), installed when missing.
- podman reads ``containers.conf`` from ``CONTAINERS_CONF``: runc, because crun refuses a
  cgroup v1 hybrid host, and default ulimits root may set (podman's own ask for more than
  the host's hard limit and the container fails to start).

Standard library only: ``make image`` runs before the project's virtualenv exists.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from deploy.debian_packages import install

# podman 4.3 (bookworm): buildah is built in; catatonit is what ``--init`` runs; netavark
# is its network backend (the tests use the host's network, podman still wants one).
TOOLS = {
    "podman": "podman",
    "runc": "runc",
    "debootstrap": "debootstrap",
    "catatonit": "catatonit",
    "netavark": "netavark",
}
CONTAINERS_CONF = """\
# Written by deploy/image/podman.py for ferrymq's image build and container tests.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=20000:20000"]

[engine]
runtime = "runc"
"""
ROOT = Path(__file__).resolve().parent.parent.parent
CACHE = Path(os.environ.get("FERRYMQ_IMAGE_CACHE", str(ROOT / ".cache" / "image")))
COMMAND_TIMEOUT_S = 1800.0


class PodmanError(RuntimeError):
    """podman or a tool it needs failed; the message says which and why."""


def _tool_present(package: str) -> bool:
    if package in ("catatonit", "netavark"):
        return any(
            Path(d, package).exists()
            for d in ("/usr/libexec/podman", "/usr/lib/podman", "/usr/bin")
        )
    return shutil.which(package, path="/usr/sbin:/usr/bin:/sbin:/bin") is not None


def ensure_tools() -> None:
    """Install podman, runc, debootstrap and catatonit from Debian when one is missing."""
    missing = [package for package in TOOLS.values() if not _tool_present(package)]
    if missing:
        failure = install(missing, present=lambda: all(_tool_present(p) for p in missing))
        if failure:
            raise PodmanError(failure)


def environment() -> dict[str, str]:
    """``os.environ`` with ``CONTAINERS_CONF`` naming the configuration above."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / "containers.conf"
    if not path.exists() or path.read_text() != CONTAINERS_CONF:
        path.write_text(CONTAINERS_CONF)
    return {**os.environ, "CONTAINERS_CONF": str(path)}


def podman(
    *arguments: str, check: bool = True, timeout_s: float = COMMAND_TIMEOUT_S, **run
) -> subprocess.CompletedProcess:
    """``podman arguments...``; raises ``PodmanError`` with its error output when it fails
    and ``check`` is set."""
    done = subprocess.run(
        ["podman", *arguments],
        env=environment(),
        text=True,
        timeout=timeout_s,
        **({"capture_output": True} | run),
    )
    if check and done.returncode != 0:
        output = (done.stderr or "")[-3000:]
        raise PodmanError(f"podman {' '.join(arguments[:3])} failed ({done.returncode}): {output}")
    return done


# ---- what netavark leaves on the host ------------------------------------------------------
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
IPTABLES_TABLES = ("filter", "nat")


@dataclass(frozen=True)
class HostNetwork:
    """What a bridge network changes on the host: ip_forward and netavark's chains."""

    ip_forward: str
    netavark_rules: frozenset[tuple[str, str]]  # (table, ``iptables -S`` line)


def netavark_rules() -> frozenset[tuple[str, str]]:
    if shutil.which("iptables") is None:
        return frozenset()
    found = set()
    for table in IPTABLES_TABLES:
        listed = subprocess.run(["iptables", "-t", table, "-S"], capture_output=True, text=True)
        found |= {(table, line) for line in listed.stdout.splitlines() if "NETAVARK" in line}
    return frozenset(found)


def host_network() -> HostNetwork:
    return HostNetwork(IP_FORWARD.read_text().strip(), netavark_rules())


def restore_host_network(before: HostNetwork) -> list[str]:
    """Undo what appeared since ``before``: netavark's rules and chains (jumps first), and
    ip_forward. What was changed, one line each."""
    changed = []
    added = netavark_rules() - before.netavark_rules
    for table, line in sorted(added, key=lambda rule: not rule[1].startswith("-A")):
        words = shlex.split(line)
        if words[0] == "-A":
            arguments = ["-D", *words[1:]]
        elif words[0] == "-N":
            subprocess.run(["iptables", "-t", table, "-F", words[1]], capture_output=True)
            arguments = ["-X", words[1]]
        else:
            continue
        subprocess.run(["iptables", "-t", table, *arguments], capture_output=True)
        changed.append(f"iptables -t {table} {line}")
    if IP_FORWARD.read_text().strip() != before.ip_forward:
        IP_FORWARD.write_text(before.ip_forward + "\n")
        changed.append(f"ip_forward back to {before.ip_forward}")
    return changed
