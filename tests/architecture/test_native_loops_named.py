"""Every native loop is named in docs/architecture.md with its twin and its fuzz target.

Issue 40 asks that the architecture document name each native loop, its Python twin (the
specification it is checked against) and its fuzz target. The table is "The per-message
loops in C"; this test reads it and the built extensions, so a C function added without
its row, a row whose twin was renamed away, or a fuzz target that no longer exists fails
here rather than in a reader's hands."""

from __future__ import annotations

import importlib
import re

from tests.support.imports import ROOT, our_modules
from tests.support.native_fuzz import TARGETS

ARCHITECTURE = ROOT / "docs" / "architecture.md"
EXTENSIONS = ("ferrymq.codec._speedups", "store._speedups", "ha._replica_lane")
PYTHON_TREES = ("ferrymq", "store", "ha", "node", "routing")
NOT_A_PARSER = "not a parser"
NAME = re.compile(r"`([A-Za-z_][\w.]*)`")


def loop_rows() -> list[list[str]]:
    """The cells of the table under "The per-message loops in C" (header row skipped)."""
    text = ARCHITECTURE.read_text()
    section = text[text.index("### The per-message loops in C") :]
    rows = []
    for line in section.splitlines()[1:]:
        if line.startswith("#"):
            break
        if line.startswith("| ") and not line.startswith("| C function"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def exported(module_name: str) -> set[str]:
    """The functions and types an extension exports (its constants aside)."""
    module = importlib.import_module(module_name)
    return {
        name for name in dir(module) if not name.startswith("_") and callable(getattr(module, name))
    }


def named_in_first_column(rows: list[list[str]]) -> set[str]:
    names = set()
    for row in rows:
        for name in NAME.findall(row[0]):
            names.add(name)
            names.add(name.split(".")[0])  # ``Gmac.seal`` names the type ``Gmac``
    return names


def defined_in_python() -> set[str]:
    """Every function, class and module-level name the packages define."""
    defined = set()
    pattern = re.compile(r"^\s*(?:def|class)\s+(\w+)|^(\w+)\s*[:=]", re.M)
    for module, path in our_modules().items():
        if module.split(".")[0] in PYTHON_TREES:
            for match in pattern.finditer(path.read_text()):
                defined.add(match.group(1) or match.group(2))
    return defined


def test_every_function_and_type_an_extension_exports_has_a_row():
    rows = loop_rows()
    assert rows, "the table of native loops was not found"
    named = named_in_first_column(rows)
    missing = {
        f"{module}.{name}"
        for module in EXTENSIONS
        for name in exported(module)
        if name not in named
    }
    assert not missing, f"native functions with no row in docs/architecture.md: {missing}"


def resolves(dotted: str) -> bool:
    """Whether ``package.module.name`` (or ``package.module.Class.name``) imports."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            found = getattr(found, part, None)
        return found is not None
    return False


def test_every_row_names_a_twin_that_exists():
    defined = defined_in_python()
    for row in loop_rows():
        twins = NAME.findall(row[2])
        assert twins, f"no twin named for {row[0]}"
        for twin in twins:
            if twin.split(".")[0] in PYTHON_TREES:
                assert resolves(twin), f"{row[0]}: its twin {twin} does not import"
            elif f"`{twin}` package" not in row[2]:  # a library's, e.g. "the `crc32c` package"
                name = twin.split(".")[-1]
                assert name in defined, f"{row[0]}: its twin {name} is defined nowhere"


def test_every_row_names_a_fuzz_target_that_exists_or_says_why_not():
    for row in loop_rows():
        target = row[3]
        if target.startswith(NOT_A_PARSER):
            continue
        names = NAME.findall(target)
        assert names, f"{row[0]}: no fuzz target named and no reason given"
        assert names[0] in TARGETS, f"{row[0]}: fuzz target {names[0]} is not in native_fuzz"
