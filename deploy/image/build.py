"""``python3 -m deploy.image.build`` (``make image``): ferrymq's container image, from this
checkout, without any registry.

1. podman, runc, debootstrap and catatonit from Debian's packages when missing;
2. the base image (``deploy/image/base.py``: debootstrap, cached);
3. ``podman build`` of ``deploy/image/Containerfile``: a build stage compiles ferrymq's C
   extensions into a virtualenv, the final stage copies the virtualenv onto the base (no
   compiler). The context is what the install reads, of the checkout's files git knows of
   (tracked, or new and not ignored): no virtualenv, cache, data directory, tests or
   benchmarks, so a change to those rebuilds nothing. pip inside the build checks
   the package index against the host's CA bundle, mounted read-only for the build and
   absent from the image.

Prints the image's tag, its size and the build's time. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from deploy.image.base import ensure_base_image
from deploy.image.podman import ROOT, PodmanError, ensure_tools, podman

CONTAINERFILE = "deploy/image/Containerfile"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
DEFAULT_TAG = "localhost/ferrymq:dev"
BUILD_STAGE_TAG = "localhost/ferrymq-build:dev"
LABEL = "dev.ferrymq.image"  # on every layer of both stages (deploy/image/Containerfile)
# pyproject.toml's packages (setuptools' find: include), the files its metadata reads, and
# the image's own files.
CONTEXT = (
    "pyproject.toml",
    "README.md",
    "store/",
    "ha/",
    "routing/",
    "node/",
    "ferrymq/",
    "chaos/",
    "deploy/image/",
)


def version() -> str:
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


def checkout_files() -> list[str]:
    """The checkout's files git knows of (tracked, or new and not ignored) that the image's
    build reads."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    return [
        name
        for name in listed.decode().split("\0")
        if name.startswith(CONTEXT) and (ROOT / name).is_file()
    ]


def stage_context(directory: Path) -> None:
    for name in checkout_files():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target)


def build_image(tag: str = DEFAULT_TAG) -> dict:
    """Build ``tag``; what was built (tag, base, bytes, seconds)."""
    started = time.monotonic()
    shown = {"capture_output": False, "stdout": sys.stderr}  # podman's steps, as they go
    ensure_tools()
    base = ensure_base_image()
    with tempfile.TemporaryDirectory(prefix="ferrymq-image-context-") as context:
        stage_context(Path(context))
        common = [
            "build",
            "--format=docker",  # HEALTHCHECK is a Docker image field, not an OCI one
            "--layers",
            "--network=host",
            f"--build-arg=BASE={base}",
            f"--volume={CA_BUNDLE}:{CA_BUNDLE}:ro",
            f"--file={Path(context) / CONTAINERFILE}",
        ]
        # The build stage tagged too: untagged, its layers (the compiler, the dependencies)
        # would be pruned below and every build would fetch and install them again.
        podman(*common, "--target=build", f"--tag={BUILD_STAGE_TAG}", context, **shown)
        podman(*common, f"--tag={tag}", f"--tag=localhost/ferrymq:{version()}", context, **shown)
    # The previous build's layers that nothing uses now (this image's only: they carry its
    # label; the layers the next build may reuse have children and stay).
    podman("image", "prune", "--force", f"--filter=label={LABEL}", check=False)
    inspected = json.loads(podman("image", "inspect", tag).stdout)[0]
    return {
        "tag": tag,
        "base": base,
        "image_bytes": inspected["Size"],
        "build_s": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m deploy.image.build", description=__doc__)
    parser.add_argument("--tag", default=DEFAULT_TAG)
    args = parser.parse_args(argv)
    try:
        built = build_image(args.tag)
    except (PodmanError, subprocess.SubprocessError, OSError) as error:
        print(f"make image: {error}", file=sys.stderr)
        return 1
    print(json.dumps(built))
    return 0


if __name__ == "__main__":
    sys.exit(main())
