"""The code a launched node runs: this checkout's (``ferrymq.launcher.cluster.this_runtime``).

A node is started with ``PYTHONPATH`` set to its runtime's package root. That root must
be the directory that holds the node's packages, so that a node runs the checkout that
launched it whatever its working directory and whatever else the interpreter could import
(an editable install of another checkout in a shared virtualenv ran that checkout's node
code instead, silently: a benchmark of a branch measured another tree)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ferrymq.launcher import cluster
from ferrymq.launcher.cluster import this_runtime
from node import config

CHECKOUT = Path(cluster.__file__).resolve().parents[2]


def test_this_runtimes_package_root_holds_the_packages_a_node_imports():
    root = Path(this_runtime().package_root)
    assert root == CHECKOUT
    for package in ("node", "ferrymq", "store", "ha", "routing"):
        assert (root / package / "__init__.py").is_file(), package


def test_a_node_process_imports_this_checkout_from_any_directory(tmp_path):
    """Without ``site`` (so no install can answer the import), from another directory, the
    environment a node is started with finds this checkout's packages."""
    runtime = this_runtime()
    found = subprocess.run(
        [
            runtime.python,
            "-S",
            "-c",
            "import ferrymq.launcher.cluster as c, node.config as n; print(c.__file__, n.__file__)",
        ],
        env={**os.environ, "PYTHONPATH": runtime.package_root},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert found.returncode == 0, found.stderr
    expected = (Path(cluster.__file__).resolve(), Path(config.__file__).resolve())
    assert tuple(Path(p).resolve() for p in found.stdout.split()) == expected
