"""Generate the Python protocol modules from ``proto/`` into ``ferrymq/protocol/``.

    python proto/generate.py           # regenerate the checked-in modules
    python proto/generate.py --check   # exit 1, naming the files, if they are stale

The generator is pinned: grpcio-tools==1.85.1 (its bundled protoc writes protobuf 7.35.1
gencode). The output is compared byte for byte, so both modes refuse to run (exit 2) under
any other grpcio-tools version. That gencode checks its runtime at import: it needs
protobuf>=7.35.1 and grpcio>=1.85.1, as pyproject.toml declares.

Generated modules import each other by their proto path (``apache.rocketmq.v2``) and name
that path as their Python module. Both are rewritten to live under ``ferrymq.protocol``, so
that the imports resolve and the message classes can be pickled (their ``__module__`` must be
importable). The proto file names in the descriptor pool stay the official ones: the
official RocketMQ Python client cannot share a process with these modules.
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.metadata
import os
import re
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO_DIR = os.path.join(ROOT, "proto")
OUTPUT_DIR = os.path.join(ROOT, "ferrymq", "protocol")
PACKAGE = "ferrymq.protocol"
SOURCES = [
    "apache/rocketmq/v2/definition.proto",
    "apache/rocketmq/v2/service.proto",
    "ferrymq/admin.proto",
    "ferrymq/data.proto",
    "ferrymq/routing.proto",
]
GENERATOR_VERSION = "1.85.1"
IMPORT = re.compile(r"^from (apache\.rocketmq\.v2|ferrymq) import (\w+_pb2)", re.MULTILINE)
MODULE_NAME = re.compile(r"(BuildTopDescriptorsAndMessages\(DESCRIPTOR, ')([\w.]+')")


def generator_mismatch() -> str | None:
    """Say why the installed generator cannot be used, or None when it is the pinned one."""
    try:
        installed = importlib.metadata.version("grpcio-tools")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed == GENERATOR_VERSION:
        return None
    return (
        f"proto/generate.py needs grpcio-tools=={GENERATOR_VERSION} (installed: {installed}); "
        f"other versions write different code. pip install grpcio-tools=={GENERATOR_VERSION}"
    )


def generate(output: str) -> None:
    from grpc_tools import protoc

    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    arguments = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"-I{include}",
        f"--python_out={output}",
        f"--pyi_out={output}",
        f"--grpc_python_out={output}",
        *(os.path.join(PROTO_DIR, source) for source in SOURCES),
    ]
    if protoc.main(arguments) != 0:
        raise SystemExit("protoc failed")
    for directory, _, files in os.walk(output):
        relative = os.path.relpath(directory, output)
        if relative != "." and "__init__.py" not in files:
            open(os.path.join(directory, "__init__.py"), "w").close()
        for name in files:
            if name.endswith((".py", ".pyi")):
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                text = IMPORT.sub(
                    lambda m: f"from {PACKAGE}.{m.group(1)} import {m.group(2)}", text
                )
                text = MODULE_NAME.sub(rf"\g<1>{PACKAGE}.\g<2>", text)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)


def generated_files(directory: str) -> set[str]:
    found = set()
    for base, _, files in os.walk(directory):
        for name in files:
            top_init = base == directory and name == "__init__.py"
            if name.endswith((".py", ".pyi")) and not top_init:
                found.add(os.path.relpath(os.path.join(base, name), directory))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the modules are stale")
    parser.add_argument("--output", default=OUTPUT_DIR, help="where the modules live")
    args = parser.parse_args()
    output = args.output
    mismatch = generator_mismatch()
    if mismatch:
        print(mismatch, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        generate(scratch)
        fresh = generated_files(scratch)
        if args.check:
            current = generated_files(output)
            stale = sorted(
                name
                for name in fresh | current
                if name not in fresh
                or name not in current
                or not filecmp.cmp(
                    os.path.join(scratch, name), os.path.join(output, name), shallow=False
                )
            )
            if stale:
                print("stale generated protocol modules (run python proto/generate.py):")
                for name in stale:
                    print(f"  ferrymq/protocol/{name}")
                return 1
            return 0
        for name in generated_files(output):
            os.unlink(os.path.join(output, name))
        for name in fresh:
            target = os.path.join(output, name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(os.path.join(scratch, name), target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
