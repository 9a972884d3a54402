"""The import rules between the repository's packages (docs/architecture.md, "Layers").

Every import of every module is read with ``ast``, at module level and inside functions
(a lazy import is still a dependency), and checked against one table: which layer may
import which. The table has no cycle, so neither can the packages; no two modules import
each other either, directly or around a loop. The same table is in docs/architecture.md,
and this test checks that they agree.

Within the tests the same reading holds them to one more rule: a test module imports
nothing of the tests but ``tests.support`` (fixtures come through pytest, from
tests/conftest.py), so no test depends on another test module."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.support.imports import TOP_LEVEL, Import, all_imports, imports_of, our_modules

ROOT = Path(__file__).resolve().parent.parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# Each layer and the layers it may import besides itself.
LAYERS: dict[str, frozenset[str]] = {
    "ferrymq.codec": frozenset(),
    "ferrymq.protocol": frozenset(),
    "routing": frozenset({"ferrymq.protocol"}),
    "store": frozenset({"ferrymq.codec"}),
    "ha": frozenset({"ferrymq.codec", "store", "routing"}),
    "node": frozenset({"ferrymq.codec", "ferrymq.protocol", "store", "ha", "routing"}),
    "ferrymq.client": frozenset({"ferrymq.codec", "ferrymq.protocol"}),
    "ferrymq.spark": frozenset({"ferrymq.codec", "ferrymq.protocol", "ferrymq.client"}),
    "ferrymq.launcher": frozenset({"ferrymq.client", "node"}),
    "chaos": frozenset(
        {"ferrymq.codec", "ferrymq.protocol", "store", "ha", "ferrymq.client", "ferrymq.launcher"}
    ),
    "ferrymq.cli": frozenset(
        {
            "ferrymq.codec",
            "ferrymq.protocol",
            "store",
            "ha",
            "routing",
            "node",
            "ferrymq.client",
            "ferrymq.spark",
            "ferrymq.launcher",
            "chaos",
        }
    ),
    "bench": frozenset(
        {
            "ferrymq.codec",
            "ferrymq.protocol",
            "store",
            "node",
            "ferrymq.client",
            "ferrymq.spark",
            "ferrymq.launcher",
            "deploy",
        }
    ),
    "deploy": frozenset({"ferrymq.client", "ferrymq.launcher"}),
    "proto": frozenset(),
    "tests": frozenset(
        {
            "ferrymq.codec",
            "ferrymq.protocol",
            "store",
            "ha",
            "routing",
            "node",
            "ferrymq.client",
            "ferrymq.spark",
            "ferrymq.launcher",
            "ferrymq.cli",
            "chaos",
            "bench",
            "deploy",
            "proto",
        }
    ),
}
assert frozenset(layer.split(".")[0] for layer in LAYERS) == TOP_LEVEL
# The codec is the lowest layer: besides the standard library, only this.
CODEC_THIRD_PARTY = frozenset({"crc32c"})


def layer_of(module: str) -> str | None:
    """The layer holding ``module``: the longest table entry it is or is under."""
    found = [layer for layer in LAYERS if module == layer or module.startswith(layer + ".")]
    return max(found, key=len) if found else None


def violations(imports: list[Import]) -> list[str]:
    """Every import the table forbids, as ``module:line imports target (layer → layer)``."""
    wrong = []
    for found in imports:
        source, target = layer_of(found.module), layer_of(found.target)
        if source == target:
            continue
        if source is None or target is None or target not in LAYERS[source]:
            wrong.append(
                f"{found.module}:{found.line} imports {found.target} ({source} → {target})"
            )
    return wrong


def cycle_in(graph: Mapping[str, set[str] | frozenset[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for successor in sorted(graph.get(node, ())):
            if state.get(successor) == 1:
                return [*path[path.index(successor) :], successor]
            if successor not in state and (found := visit(successor)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_every_module_is_in_a_layer():
    """A module outside the table (a loose ``ferrymq/x.py``) has no rules: refused."""
    outside = [name for name in our_modules() if name != "ferrymq" and layer_of(name) is None]
    assert outside == []


def test_imports_follow_the_layer_table():
    assert violations(all_imports()) == []


# What the tests share: everything else of theirs is a test module, a conftest (its
# fixtures come through pytest) or the package ``tests`` itself.
TEST_SUPPORT = "tests.support"


def imports_between_tests(imports: list[Import]) -> list[str]:
    """Every import of the tests' own code other than ``tests.support``, by any module."""
    return [
        f"{found.module}:{found.line} imports {found.target}"
        for found in imports
        if layer_of(found.target) == "tests"
        and found.target != TEST_SUPPORT
        and not found.target.startswith(TEST_SUPPORT + ".")
    ]


def test_no_test_module_imports_another():
    """Helpers two test modules share live in tests/support/, fixtures in tests/conftest.py:
    a test module imported by another is a library nobody can find, and runs its tests
    twice when pytest collects it under another name."""
    assert imports_between_tests(all_imports()) == []


def test_the_checker_catches_a_test_module_imported(tmp_path):
    """From real source, whichever way it is written (absolute, from the package,
    relative): a test module, a conftest or the package ``tests`` is refused, tests.support
    is not."""
    source = tmp_path / "planted.py"
    source.write_text(
        "from tests.node.test_node import stubs\n"
        "from tests.node import test_pop_node\n"
        "import tests.cluster.test_cluster\n"
        "from .test_produce import produce\n"
        "from ..conftest import FREE_DISK_NEEDED\n"
        "from tests import conftest\n"
        "def lazy():\n"
        "    from tests.store.test_store_layers import open_store\n"
        "from tests.support.rpc import stubs\n"
        "from tests.support import ROOT\n"
        "from ..support.nodes import start_node\n"
        "from node.convert import scan_produce_records\n"
    )
    modules = {**our_modules(), "tests.node.test_planted": source}
    found = list(imports_of("tests.node.test_planted", source, modules))
    assert imports_between_tests(found) == [
        f"tests.node.test_planted:{line} imports {target}"
        for line, target in [
            (1, "tests.node.test_node"),
            (2, "tests.node.test_pop_node"),
            (3, "tests.cluster.test_cluster"),
            (4, "tests.node.test_produce"),
            (5, "tests.conftest"),
            (6, "tests.conftest"),
            (8, "tests.store.test_store_layers"),
        ]
    ]
    assert len(found) == 11  # and the allowed ones were read too


def test_the_checker_catches_a_forbidden_import():
    """The rules bite: the node importing the CLI, the store the node, the SDK the store,
    the codec the SDK; an allowed one passes."""
    forbidden = [
        Import("node.server", "ferrymq.cli.main", 1),
        Import("store.commitlog", "node.convert", 1),
        Import("ferrymq.client.messages", "store.message", 1),
        Import("ferrymq.codec.properties", "ferrymq.client.messages", 1),
        Import("ha.slave", "node.replication", 1),
        Import("ferrymq.loose", "ferrymq.codec.properties", 1),
    ]
    assert len(violations(forbidden)) == len(forbidden)
    assert violations([Import("store.commitlog", "ferrymq.codec.commitlog_record", 1)]) == []


# The store's parts: the node and replication use ``MessageStore``'s accessors instead, so
# the store can change its parts without breaking them.
STORE_PARTS = frozenset({"commitlog", "consume_queues", "dispatcher"})
FACADE_USERS = ("node", "ha")


def store_part_reaches(source: str, filename: str) -> list[str]:
    """Every ``x.commitlog``, ``x.consume_queues`` or ``x.dispatcher`` in ``source``, as
    ``file:line .part`` (on any object: a name cannot tell a store from another thing)."""
    found = [
        node
        for node in ast.walk(ast.parse(source, filename))
        if isinstance(node, ast.Attribute) and node.attr in STORE_PARTS
    ]
    return [
        f"{filename}:{node.lineno} .{node.attr}" for node in sorted(found, key=lambda n: n.lineno)
    ]


def test_node_and_ha_use_the_stores_accessors_not_its_parts():
    reaches = [
        reach
        for name, path in our_modules().items()
        if name.split(".")[0] in FACADE_USERS
        for reach in store_part_reaches(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert reaches == []


def test_the_checker_catches_a_reach_into_the_store():
    source = (
        "from store.commitlog import PreparedMessage\n"  # a module import is no reach
        "a = store.commitlog.write_offset\n"
        "b = self._store.consume_queues.get(t, q)\n"
        "store.dispatcher.listeners.append(f)\n"
        "c = store.write_offset\n"
    )
    assert store_part_reaches(source, "x.py") == [
        "x.py:2 .commitlog",
        "x.py:3 .consume_queues",
        "x.py:4 .dispatcher",
    ]


def test_the_layer_table_has_no_cycle():
    """So no two packages can depend on each other, however their modules do it."""
    assert cycle_in(LAYERS) is None
    assert cycle_in({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_no_two_modules_import_each_other():
    """Not even around a loop, nor through a function-level or TYPE_CHECKING import (the
    SDK's coalescer once imported its producer for a type while the producer imported it)."""
    graph: dict[str, set[str]] = {}
    for found in all_imports():
        graph.setdefault(found.module, set()).add(found.target)
    assert cycle_in(graph) is None


def test_the_codec_imports_only_the_standard_library_and_crc32c():
    outside = []
    for name, path in our_modules().items():
        if layer_of(name) != "ferrymq.codec":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            outside += [
                f"{name} imports {top}"
                for top in tops
                if top not in sys.stdlib_module_names
                and top not in CODEC_THIRD_PARTY
                and top != "ferrymq"
            ]
    assert outside == []


def documented_table() -> dict[str, frozenset[str]]:
    """The table of docs/architecture.md's "Layers" section: `layer` | `may import`, ..."""
    text = ARCHITECTURE.read_text()
    section = text[text.index("## Layers") :]
    section = section[: section.index("\n## ", 1)]
    table = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and re.fullmatch(r"`[\w.]+`", cells[0]):
            table[cells[0].strip("`")] = frozenset(re.findall(r"`([\w.]+)`", cells[1]))
    return table


def test_the_documented_table_is_this_table():
    documented = documented_table()
    assert documented == LAYERS
