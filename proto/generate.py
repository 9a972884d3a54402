"""Generate the Python protocol modules from ``proto/`` into ``ferrymq/protocol/``.

    python proto/generate.py           # regenerate the checked-in modules
    python proto/generate.py --check   # exit 1, naming the files, if they are stale

Generated modules import each other by their proto path (``apache.rocketmq.v2``); they are
rewritten to live under ``ferrymq.protocol`` so that ferrymq's copy never collides with
another package that registers the same proto paths in the same process.
"""

from __future__ import annotations

import argparse
import filecmp
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
]
IMPORT = re.compile(r"^from (apache\.rocketmq\.v2|ferrymq) import (\w+_pb2)", re.MULTILINE)


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
