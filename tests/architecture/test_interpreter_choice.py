"""Which interpreter the Makefile makes .venv from (``make which-python``): the system's
when it can make a virtualenv and build the C speedups, else the first python3 on PATH;
``PYTHON`` chooses whatever those say. The choice matters for every figure: the system's
interpreter (Debian's, the container image's) measured faster here (bench/RESULTS.md,
"The interpreter")."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import ROOT


def chosen(**variables: str) -> str:
    """What ``make which-python`` prints with ``variables`` set on its command line."""
    done = subprocess.run(
        ["make", "-s", "which-python", *(f"{name}={value}" for name, value in variables.items())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "PYTHON"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def fake_python(path: Path, exit_code: int) -> Path:
    """An interpreter that answers every check with ``exit_code`` (1: it has no venv module
    or no headers, as Debian's python3 without python3-venv or python3-dev)."""
    path.write_text(f"#!/bin/sh\nexit {exit_code}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_system_interpreter_is_chosen_when_it_can_make_the_virtualenv():
    # This test's own interpreter has a venv module and headers: make test built .venv.
    assert chosen(SYSTEM_PYTHON=sys.executable) == sys.executable


def test_a_system_interpreter_that_cannot_make_it_leaves_the_choice_to_path(tmp_path):
    assert chosen(SYSTEM_PYTHON=str(fake_python(tmp_path / "python3", 1))) == "python3"
    assert chosen(SYSTEM_PYTHON=str(tmp_path / "absent")) == "python3"


WITHOUT = {
    "its venv module": "sys.modules['ensurepip'] = None",
    "its headers": "import sysconfig; real = sysconfig.get_paths; "
    "sysconfig.get_paths = lambda *a, **k: {**real(*a, **k), 'include': '/nonexistent'}",
    # sysconfig's paths name the version: taken before it changes, the headers still found
    "3.11": "import sysconfig; real = sysconfig.get_paths; paths = real(); "
    "sysconfig.get_paths = lambda *a, **k: real(*a, **k) if a or k else paths; "
    "sys.version_info = (3, 10, 14)",
}


@pytest.mark.parametrize("missing", sorted(WITHOUT))
def test_an_interpreter_without_each_requirement_is_passed_over(tmp_path, missing):
    """This test's interpreter, made to lack one thing the check asks for, is not chosen;
    the same wrapper with nothing taken away is."""

    def wrapper(name: str, prelude: str) -> Path:
        path = tmp_path / name
        quoted = f"import sys; {prelude}; exec(sys.argv[1])".replace('"', '\\"')
        path.write_text(f'#!/bin/sh\nexec {sys.executable} -c "{quoted}" "$2"\n')
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return path

    assert chosen(SYSTEM_PYTHON=str(wrapper("lacking", WITHOUT[missing]))) == "python3"
    whole = wrapper("whole", "pass")
    assert chosen(SYSTEM_PYTHON=str(whole)) == str(whole)


def test_python_given_is_used_whatever_the_system_has(tmp_path):
    assert chosen(PYTHON="/opt/other/python3", SYSTEM_PYTHON=sys.executable) == (
        "/opt/other/python3"
    )
    done = subprocess.run(
        ["make", "-s", "which-python"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHON": "/opt/env/python3"},
    )
    assert done.stdout.strip() == "/opt/env/python3"


def test_the_virtualenv_is_made_anew_only_when_the_choice_changes(tmp_path):
    """venv keeps the links of an existing .venv, so one made from another interpreter is
    made with --clear; a changed C source or pyproject.toml installs again without it."""
    makefile = (Path(ROOT) / "Makefile").read_text()
    listed = re.search(r"C_SOURCES := (.*?)\n(?!\t)", makefile, re.S).group(1).split()
    sources = [name for name in listed if name != "\\"]
    for name in ["pyproject.toml", *sources]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "Makefile").write_text(makefile)
    log = tmp_path / "calls.log"

    def interpreter(name: str) -> Path:
        """Logs its arguments; as ``-m venv DIR`` it makes DIR/bin/python, itself."""
        path = tmp_path / name
        path.write_text(
            "#!/bin/sh\n"
            f'echo "{name} $*" >> {log}\n'
            'if [ "$1 $2" = "-m venv" ]; then eval "dir=\\${$#}"; '
            f'mkdir -p "$dir/bin"; cp {path} "$dir/bin/python"; fi\n'
        )
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return path

    first, second = interpreter("first"), interpreter("second")

    def install(python: Path) -> list[str]:
        log.write_text("")
        done = subprocess.run(
            ["make", "-s", ".venv/.installed", f"PYTHON={python}"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return [line for line in log.read_text().splitlines() if " -m venv" in line]

    assert install(first) == ["first -m venv --clear .venv"]
    assert install(first) == []
    changed, now = tmp_path / sources[0], time.time()
    os.utime(changed, (now + 5, now + 5))  # newer than the stamp, whatever the clock's grain
    assert install(first) == ["first -m venv .venv"]
    os.utime(changed, (now - 60, now - 60))
    assert install(second) == ["second -m venv --clear .venv"]
    assert install(second) == []
