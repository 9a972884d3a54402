"""The base image, made from Debian's packages without any registry: ``debootstrap
--variant=minbase`` of bookworm, trimmed, imported with ``podman import``.

The root filesystem is cached as a tarball named after what it holds (suite, packages), and
the image is made from it only when podman does not have it: a rebuild neither bootstraps
nor imports again. The Debian mirror is the one this machine's apt uses, read at run time.

Standard library only (``make image`` runs before the project's virtualenv exists).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from deploy.image.podman import CACHE, PodmanError, podman

SUITE = "bookworm"
# python3-venv builds the virtualenv in the build stage (the final image copies it); tini
# is PID 1 in the image itself, so that it is there under Kubernetes too (no --init).
PACKAGES = ("python3", "python3-venv", "tini")
SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
DEBOOTSTRAP_TIMEOUT_S = 1200.0
# What a container never needs: the downloaded packages and apt's lists (a build stage
# that installs more runs ``apt-get update`` first), documentation, locales but C.
TRIMMED = (
    "var/cache/apt/archives/*.deb",
    "var/lib/apt/lists/*_*",
    "usr/share/doc/*",
    "usr/share/man/*",
    "usr/share/info/*",
)


def base_tag() -> str:
    """The base image's name, after what it holds: another package list is another image."""
    key = hashlib.sha256(" ".join((SUITE, *PACKAGES)).encode()).hexdigest()[:12]
    return f"localhost/ferrymq-base:{SUITE}-{key}"


def debian_mirror(sources: tuple[Path, ...] = SOURCES) -> str:
    """The first Debian archive (not the security one) this machine's apt names."""
    for path in sources:
        if not path.exists():
            continue
        text = path.read_text()
        if path.suffix == ".sources":  # deb822 stanzas
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.MULTILINE))
                suites = fields.get("Suites", "").split()
                if SUITE in suites and "deb" in fields.get("Types", "").split():
                    return fields["URIs"].split()[0]
        else:
            for line in text.splitlines():
                words = line.split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                    return words[1]
    raise PodmanError(f"no {SUITE} archive in {', '.join(map(str, sources))}")


def ensure_base_image() -> str:
    """The base image's tag, made (from the cached root filesystem when there is one) if
    podman does not have it."""
    tag = base_tag()
    if podman("image", "exists", tag, check=False).returncode == 0:
        return tag
    tarball = CACHE / f"rootfs-{tag.rpartition(':')[2]}.tar"
    if not tarball.exists():
        bootstrap(tarball)
    with tarball.open("rb") as rootfs:
        podman("import", "--change", 'CMD ["/bin/bash"]', "-", tag, stdin=rootfs)
    return tag


def bootstrap(tarball: Path) -> None:
    """debootstrap the root filesystem into ``tarball`` (written whole, then renamed)."""
    mirror = debian_mirror()
    with tempfile.TemporaryDirectory(prefix="ferrymq-rootfs-") as scratch:
        rootfs = Path(scratch, "rootfs")
        argv = [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(PACKAGES)}",
            SUITE,
            str(rootfs),
            mirror,
        ]
        print(f"$ {' '.join(argv)}", file=sys.stderr, flush=True)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=DEBOOTSTRAP_TIMEOUT_S)
        if done.returncode != 0:
            raise PodmanError(f"debootstrap failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        for pattern in TRIMMED:
            for path in rootfs.glob(pattern):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        partial = tarball.with_suffix(".partial")
        subprocess.run(
            ["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(partial), "."],
            check=True,
            timeout=DEBOOTSTRAP_TIMEOUT_S,
        )
        partial.rename(tarball)
