"""The ``ferrymq`` command line."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ferrymq", description="ferrymq message broker")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("up", help="start a local cluster on embedded defaults")
    args = parser.parse_args(argv)
    if args.command == "up":
        print(
            "ferrymq: the broker node is not built yet (it comes with the node issue); "
            "today ferrymq is its storage engine: see `python -m bench.store --json`.",
            file=sys.stderr,
        )
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
