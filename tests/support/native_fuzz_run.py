"""``make fuzz``'s native part: every target of tests/support/native_fuzz.py for ``--seconds``
each, with random seeds and a corpus kept between runs (``.cache/fuzz/TARGET``), against
the extensions built again by clang (the Debian package, installed when missing) with
AddressSanitizer and libFuzzer's coverage: a read or write out of bounds stops the run
with a report, and the fuzzer is steered by the coverage of the C as well as the twins'.

    python -m tests.support.native_fuzz_run [--seconds N] [--target NAME ...] [--no-sanitizers]

Exits non-zero when any target failed; a failing input is kept as ``crash-*`` beside its
corpus (replay: ``python -m tests.support.native_fuzz TARGET FILE``)."""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import atheris

from deploy import debian_packages
from tests.support.native_fuzz import NATIVE_BUILDS, TARGETS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = {
    "store._speedups": "store/_speedups.c",
    "ferrymq.codec._speedups": "ferrymq/codec/_speedups.c",
    "ha._replica_lane": "ha/_replica_lane.c",
}
SANITIZE = ["-fsanitize=address,fuzzer-no-link", "-fno-omit-frame-pointer"]
# clang and its sanitizer runtimes (Debian 12's clang is 14).
CLANG_PACKAGES = ["clang", "libclang-rt-14-dev"]
ASAN_STATIC = "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.asan_static-x86_64.a"


def sanitized_builds(directory: str) -> None:
    """Every extension, with ASan and coverage, as ``NATIVE_BUILDS`` names them."""
    error = debian_packages.install(
        CLANG_PACKAGES, lambda: shutil.which("clang") is not None and bool(glob.glob(ASAN_STATIC))
    )
    if error:
        raise SystemExit(f"no clang for the sanitizer build: {error}")
    include = sysconfig.get_paths()["include"]
    for name, source in SOURCES.items():
        output = os.path.join(directory, NATIVE_BUILDS[name])
        subprocess.run(
            [
                "clang",
                "-shared",
                "-fPIC",
                "-O1",
                "-g",
                *SANITIZE,
                f"-I{include}",
                os.path.join(ROOT, source),
                "-o",
                output,
            ],
            check=True,
        )


def sanitizer_environment(directory: str) -> dict[str, str]:
    """Python itself is not built with ASan: atheris's ASan runtime (which carries its
    libFuzzer, so the coverage of Python code still steers) is preloaded, and leak checking
    (which CPython's own allocations would fail) is off."""
    return {
        "FERRYMQ_FUZZ_NATIVE_DIR": directory,
        "LD_PRELOAD": os.path.join(atheris.path(), "asan_with_fuzzer.so"),
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=600, help="per target")
    parser.add_argument("--target", action="append", choices=sorted(TARGETS))
    parser.add_argument("--no-sanitizers", action="store_true")
    options = parser.parse_args()
    failed = []
    with tempfile.TemporaryDirectory(prefix="ferrymq-fuzz-") as build:
        environment = dict(os.environ)
        if not options.no_sanitizers:
            sanitized_builds(build)
            environment.update(sanitizer_environment(build))
        for target in options.target or sorted(TARGETS):
            corpus = os.path.join(ROOT, ".cache", "fuzz", target)
            print(f"fuzz {target}: {options.seconds} s", flush=True)
            finished = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tests.support.native_fuzz",
                    target,
                    corpus,
                    f"-max_total_time={options.seconds}",
                    f"-artifact_prefix={corpus}-",
                ],
                cwd=ROOT,
                env=environment,
            )
            if finished.returncode != 0:
                failed.append(target)
    print("failed: " + ", ".join(failed) if failed else "every target passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
