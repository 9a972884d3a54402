"""Every test the repository cites exists: docs/guarantees.md proves each guarantee with
tests named by path (``tests/<layer>/test_x.py::test_name``), docs/architecture.md and
comments and docstrings name test files and helpers, and the Makefile runs some by path.
A citation of a file that moved or a test that was renamed would go on claiming a proof
nobody runs; this finds them.

What counts as a citation, in any text file of the repository:

- ``tests/.../x.py``: the file exists;
- ``tests/.../x.py::name``: and defines ``name`` (a test, a class or a helper; ``*``
  matches like a glob, ``[...]`` parameters are ignored);
- ``::name`` or a backquoted ``test_name`` after such a path, in the same paragraph or
  table row: defined in the last file cited before it;
- ``test_x.py`` without a folder: some file under tests/ has that name;
- ``python -m tests.x.y`` anywhere, and ``tests.x.y`` in documents (not Python, where
  imports check themselves): the module exists, and a name after it is defined there.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
TEXT_SUFFIXES = frozenset(
    {".md", ".py", ".toml", ".yml", ".yaml", ".c", ".h", ".proto", ".txt", ".cfg", ".sh"}
)
SKIPPED_DIRECTORIES = frozenset({".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache"})
# This file: its own examples of citations are not citations.
SELF = Path(__file__).resolve()

CITATION = re.compile(
    r"(?<![\w/.-])(?P<path>tests/[\w/]+\.py)(?:::(?P<member>[\w*]+))?"  # tests/x.py::name
    r"|(?<![\w:])::(?P<more>[A-Za-z_][\w*]*)"  # ::name, of the last path cited
    r"|`(?P<bare>test_[\w*]+)`"  # `test_name`, of the last path cited
    r"|(?<![\w/.-])(?P<file>test_\w+\.py)"  # test_x.py, somewhere under tests/
    r"|(?P<run>-m\s+)?(?<![\w.])(?P<module>tests(?:\.\w+)+)"  # python -m tests.x.y
)


def project_files(root: Path) -> list[Path]:
    """The checkout's own files: what git tracks plus what it would track (not ignored).
    Caches inside the checkout (the clients' module and package caches under ``.cache``
    hold other projects' READMEs, which cite their own tests) are not ours to check.
    Without git (an unpacked sdist), every file below ``root``."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return sorted(root.rglob("*"))
    return sorted(root / name for name in listed.decode().split("\0") if name)


def text_files(root: Path) -> Iterator[Path]:
    for path in project_files(root):
        parts = path.relative_to(root).parts
        if any(part in SKIPPED_DIRECTORIES or part.endswith(".egg-info") for part in parts):
            continue
        if path.is_file() and (path.suffix in TEXT_SUFFIXES or path.name == "Makefile"):
            yield path


@cache
def defined_names(path: Path) -> frozenset[str]:
    """Every function, class and top-level name (assigned or imported) of a Python file."""
    names = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
    for node in tree.body:
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return frozenset(names)


def defines(path: Path, name: str) -> bool:
    return bool(fnmatch.filter(defined_names(path), name))


def module_path(root: Path, dotted: str) -> Path | None:
    base = root.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def check_module(root: Path, dotted: str) -> str | None:
    """Why ``dotted`` (a module, or a name in one) names nothing, or None."""
    parts = dotted.split(".")
    for end in range(len(parts), 1, -1):
        found = module_path(root, ".".join(parts[:end]))
        if found is not None:
            rest = parts[end:]
            if rest and not defines(found, rest[0]):
                return f"{'.'.join(parts[:end])} has no {rest[0]}"
            return None
    return f"no module {'.'.join(parts[:2])}"


@cache
def names_of_test_files(root: Path) -> frozenset[str]:
    return frozenset(p.name for p in (root / "tests").rglob("test_*.py"))


def check_citations(root: Path, path: Path, text: str) -> tuple[int, list[str]]:
    """How many citations ``text`` (the content of ``path``) holds, and every one of them
    that names nothing, as ``file:line: what``."""
    checked, broken = 0, []
    test_files = names_of_test_files(root)
    where = path.relative_to(root)
    cited: Path | None = None  # the last file cited in this paragraph or table row

    def problem(number: int, what: str) -> None:
        broken.append(f"{where}:{number}: {what}")

    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("|"):
            cited = None
        for match in CITATION.finditer(line):
            checked += 1
            if match["path"]:
                cited = root / match["path"]
                if not cited.is_file():
                    problem(number, f"{match['path']} does not exist")
                    cited = None
                elif match["member"] and not defines(cited, match["member"]):
                    problem(number, f"{match['path']} has no {match['member']}")
            elif match["more"] or match["bare"]:
                name = match["more"] or match["bare"]
                if cited is None:
                    checked -= 1  # a name of no file cited: nothing to check it against
                elif not defines(cited, name):
                    problem(number, f"{cited.relative_to(root)} has no {name}")
            elif match["file"]:
                if match["file"] not in test_files:
                    problem(number, f"no {match['file']} under tests/")
            elif match["run"] or path.suffix != ".py":
                if (wrong := check_module(root, match["module"])) is not None:
                    problem(number, wrong)
            else:
                checked -= 1  # a module named in Python code: its import checks it
    return checked, broken


def broken_citations(root: Path, path: Path, text: str) -> list[str]:
    return check_citations(root, path, text)[1]


def test_every_cited_test_exists():
    checked, broken = 0, []
    for path in text_files(ROOT):
        if path.resolve() != SELF:
            count, found = check_citations(ROOT, path, path.read_text(errors="replace"))
            checked += count
            broken += found
    assert broken == []
    assert checked > 100  # the citations were found at all (docs/guarantees.md: 90+)


def test_the_checker_finds_citations_of_what_does_not_exist(tmp_path):
    """On a planted tree: a file that moved, a test renamed, a name after ``::`` and in
    backquotes, a bare file name and a module run with ``-m``; the real ones pass."""
    (tmp_path / "tests" / "store").mkdir(parents=True)
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "store" / "__init__.py").write_text("")
    (tmp_path / "tests" / "store" / "test_faults.py").write_text(
        "def test_disk_full_when_a_new_segment_is_needed(): ...\n"
        "def test_torn_tail_is_cut(): ...\n"
        "class TestRecovery:\n    def test_scan(self): ...\n"
    )
    (tmp_path / "tests" / "helper.py").write_text("def main(): ...\n")
    doc = tmp_path / "guarantees.md"
    lines = [
        "| torn | `tests/store/test_faults.py::test_torn_tail_is_cut`, `::test_disk_full_*` |",
        "| moved | `tests/test_faults.py::test_torn_tail_is_cut` |",
        "| renamed | `tests/store/test_faults.py::test_torn_tail_is_cut_again`, `::test_scan` |",
        "| more | `tests/store/test_faults.py` and `test_no_such_test`, `::test_nor_this` |",
        "",
        "A paragraph citing `tests/store/test_faults.py::test_scan`,",
        "and on its next line `::test_torn_tail_is_cut[sync]` and `test_gone`.",
        "",
        "Outside any paragraph citing a file: `test_whatever` (not checked).",
        "Bare names: test_faults.py exists, test_moved.py does not.",
        "Run `python -m tests.helper`, `python -m tests.gone`; `tests.helper.main`,",
        "`tests.helper.missing`.",
    ]
    doc.write_text("\n".join(lines) + "\n")
    assert broken_citations(tmp_path, doc, doc.read_text()) == [
        "guarantees.md:2: tests/test_faults.py does not exist",
        "guarantees.md:3: tests/store/test_faults.py has no test_torn_tail_is_cut_again",
        "guarantees.md:4: tests/store/test_faults.py has no test_no_such_test",
        "guarantees.md:4: tests/store/test_faults.py has no test_nor_this",
        "guarantees.md:7: tests/store/test_faults.py has no test_gone",
        "guarantees.md:10: no test_moved.py under tests/",
        "guarantees.md:11: no module tests.gone",
        "guarantees.md:12: tests.helper has no missing",
    ]
    # In Python only ``-m`` counts: imports check themselves, and names in code are code.
    code = tmp_path / "x.py"
    code.write_text("# python -m tests.gone\nfrom tests.gone import x\n")
    assert broken_citations(tmp_path, code, code.read_text()) == ["x.py:1: no module tests.gone"]


def test_ignored_caches_in_the_checkout_are_not_checked(tmp_path):
    """A Go module cache under ``.cache`` (built by the client tests) holds other projects'
    READMEs citing their own tests: the check reads only the project's own files."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text(".cache/\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "ours.md").write_text("ours\n")
    cache_dir = tmp_path / ".cache" / "mod"
    cache_dir.mkdir(parents=True)
    (cache_dir / "README.md").write_text("run `python -m tests.yaml`\n")
    assert [p.relative_to(tmp_path).as_posix() for p in text_files(tmp_path)] == ["docs/ours.md"]
