"""Reading the repository's imports with ``ast``, for the architecture tests
(tests/architecture/): every import of every module, at module level and inside
functions (a lazy import is still a dependency), resolved to the module it loads."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
TOP_LEVEL = frozenset(
    {"ferrymq", "routing", "store", "ha", "node", "chaos", "bench", "deploy", "proto", "tests"}
)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the imported module (or module.name: resolved against what exists)
    line: int


def our_modules() -> dict[str, Path]:
    """Every Python module of the repository's packages, by dotted name."""
    modules = {}
    # Only the packages' own folders: the checkout's root also holds the virtual
    # environment and the clients' caches, tens of thousands of files to walk for nothing.
    paths = (path for top in TOP_LEVEL for path in (ROOT / top).rglob("*.py"))
    for path in sorted(paths):
        name = list(path.relative_to(ROOT).with_suffix("").parts)
        if name[-1] == "__init__":
            name.pop()
        modules[".".join(name)] = path
    return modules


def absolute_base(module: str, path: Path, level: int, name: str | None) -> str:
    """What ``from <level dots><name> import ...`` in ``module`` imports from."""
    if level == 0:
        return name or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return ".".join(part for part in (package, name) if part)


def imports_of(module: str, path: Path, modules: Mapping[str, Path]) -> Iterator[Import]:
    """The imports of ours in ``path``, wherever they are (module level, functions, blocks
    under ``if TYPE_CHECKING``), each resolved to the module it loads."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = absolute_base(module, path, node.level, node.module)
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] in TOP_LEVEL:
                target = name
                while target not in modules and "." in target:
                    target = target.rpartition(".")[0]
                if target != module:
                    yield Import(module, target, node.lineno)


@cache
def all_imports() -> tuple[Import, ...]:
    """Every import of ours, read once a run (several architecture tests check them)."""
    modules = our_modules()
    return tuple(
        found for name, path in modules.items() for found in imports_of(name, path, modules)
    )
