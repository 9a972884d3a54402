"""Fixtures shared by many test modules (helpers they import are in tests/support/).

Nodes: ``node`` is a fresh node process for one test; ``module_node`` (and its client
``address``) one shared by a whole module; ``nodes`` and ``module_nodes`` are the factories
behind them, for a test or module that needs its own configuration or several nodes. Every
node still running when its test or module ends is SIGKILLed."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.alone import ALONE
from tests.support.disk import FREE_DISK_NEEDED, SmallDisk
from tests.support.nodes import NodeProcess, start_node
from tests.support.timers import Timers


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--prebuild-drivers",
        action="store_true",
        help="build the official clients' drivers in a process beside the tests (make test)",
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    """Refuse to start on a nearly full disk, with one line that says so, instead of
    hundreds of tests failing on "no space to reserve" from the nodes they start. Then,
    with ``--prebuild-drivers``, start the drivers' builds beside the tests."""
    where = session.config.option.basetemp or tempfile.gettempdir()
    while not os.path.isdir(where):
        where = os.path.dirname(where)
    free = shutil.disk_usage(where).free
    if free < FREE_DISK_NEEDED:
        pytest.exit(
            f"the tests need {FREE_DISK_NEEDED / 2**30:.1f} GiB free where they write "
            f"({where}); it has {free / 2**30:.2f} GiB",
            returncode=1,
        )
    if session.config.getoption("prebuild_drivers") and not hasattr(session.config, "workerinput"):
        session.config.stash[PREBUILD] = start_prebuild()


# ---- the official clients' drivers, built beside the tests -------------------------------
# ``make test`` passes --prebuild-drivers to its first part: its controller (never an xdist
# worker) starts ``python -m tests.support.clients prebuild``, niced, so that the drivers'
# downloads and builds (minutes from an empty cache) run while the tests that need none
# do, and it kills that process and its builds when the session ends (a build lands with a
# rename, so one cut short leaves nothing that looks finished). Its lines go to
# .cache/clients/prebuild.log.
PREBUILD = pytest.StashKey[subprocess.Popen]()


def start_prebuild() -> subprocess.Popen:
    from tests.support.clients import CACHE, ROOT

    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "prebuild.log", "w", encoding="utf-8") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.clients", "prebuild"],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: os.nice(10),  # the tests' processes come first
            start_new_session=True,  # its builds (mvn, go) are stopped with it
        )


def pytest_sessionfinish(session: pytest.Session) -> None:
    process = session.config.stash.get(PREBUILD, None)
    if process is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # whatever build is still under way
    process.wait()


# ---- which tests run alone (tests/support/alone.py) -----------------------------------
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(str(config.rootpath))
    if missing := [name for name in ALONE if not (root / name).exists()]:
        raise pytest.UsageError(f"tests/support/alone.py names files that are gone: {missing}")
    for item in items:
        if Path(str(item.path)).relative_to(root).as_posix() in ALONE:
            item.add_marker(pytest.mark.alone)


# ---- node processes ------------------------------------------------------------------
NodeFactory = Callable[..., NodeProcess]


def _node_factory(directory: Callable[[str], Path]) -> Iterator[NodeFactory]:
    started: list[NodeProcess] = []

    def start(extra_toml: str = "", name: str = "node", **options) -> NodeProcess:
        node = start_node(str(directory(name) / name), extra_toml, **options)
        started.append(node)
        return node

    yield start
    for node in started:
        if node.process.poll() is None:
            node.sigkill()


@pytest.fixture
def nodes(tmp_path) -> Iterator[NodeFactory]:
    """Factory: ``nodes(extra_toml="", name="node", **options)`` starts a node process on
    ``tmp_path/name`` (``tests.support.nodes.start_node``: ``port``, ``log_path``, ...)."""
    yield from _node_factory(lambda name: tmp_path)


@pytest.fixture
def node(nodes) -> NodeProcess:
    """A fresh node with the default configuration, for one test."""
    return nodes()


@pytest.fixture(scope="module")
def module_nodes(tmp_path_factory) -> Iterator[NodeFactory]:
    """Factory: as ``nodes``, for nodes that serve a whole module."""
    yield from _node_factory(tmp_path_factory.mktemp)


@pytest.fixture(scope="module")
def module_node(module_nodes) -> NodeProcess:
    """One node with the default configuration, shared by the module's tests."""
    return module_nodes()


@pytest.fixture(scope="module")
def address(module_node) -> str:
    """The client address (host:port) of ``module_node``."""
    return module_node.address


# ---- in-process services ---------------------------------------------------------------
@pytest.fixture
def timers(tmp_path) -> Iterator[Timers]:
    """The timer service on a real store, with a clock the test sets (``timers.now``)."""
    created = Timers(tmp_path)
    yield created
    created.close()


# ---- machines ----------------------------------------------------------------------------
@pytest.fixture
def tmpfs_disk(tmp_path):
    """Factory: ``tmpfs_disk(kib)`` mounts a tmpfs of ``kib`` KiB; unmounted in teardown."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted: list[Path] = []

    def mount(kib: int) -> SmallDisk:
        path = tmp_path / f"disk{len(mounted)}"
        path.mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(path)], check=True
        )
        mounted.append(path)
        return SmallDisk(path)

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture(scope="session")
def spark():
    """One local Spark for every Spark test module: starting a JVM costs seconds."""
    from ferrymq.spark.session import build_session

    return build_session("local[2]", "ferrymq-tests")


@pytest.fixture(scope="module")
def prometheus_tools():
    """Prometheus and promtool, installed from the Debian package when missing (the tests
    run as root); skips where neither is possible."""
    from deploy.prometheus_server import PrometheusUnavailable, ensure_installed

    try:
        return ensure_installed()
    except PrometheusUnavailable as error:
        pytest.skip(f"needs Prometheus and root to install it: {error}")
