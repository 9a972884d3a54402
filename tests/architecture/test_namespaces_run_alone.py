"""A test that makes network namespaces runs alone (``tests/support/alone.py``): while
namespaces and their links come and go, another process's look at the host's interfaces
can fail, and the official Java clients fail to start then (mqadmin's NullPointerException
in a clean run, with a namespace test on the other worker). Namespaces are made by
``chaos.network.NodeNetwork``, directly or through a chaos run (``chaos.runner.run``)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.alone import ALONE

ROOT = Path(__file__).resolve().parent.parent.parent
NODE_NETWORK = re.compile(r"\bNodeNetwork\(")
CHAOS_RUNNER = re.compile(r"^from chaos import .*\brunner\b|^import chaos\.runner", re.MULTILINE)
CHAOS_RUN = re.compile(r"\brunner\.run\(")


def makes_namespaces(source: str) -> bool:
    chaos_run = CHAOS_RUNNER.search(source) and CHAOS_RUN.search(source)
    return bool(NODE_NETWORK.search(source) or chaos_run)


def namespace_tests() -> list[str]:
    return sorted(
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "tests").rglob("test_*.py")
        if path.resolve() != Path(__file__).resolve()
        and makes_namespaces(path.read_text(encoding="utf-8"))
    )


def test_every_test_that_makes_network_namespaces_runs_alone():
    found = namespace_tests()
    assert {"tests/chaos/test_chaos_network.py", "tests/chaos/test_chaos_run.py"} <= set(found)
    assert [name for name in found if name not in ALONE] == []
