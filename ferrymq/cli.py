"""The ``ferrymq`` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ferrymq", description="ferrymq message broker")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("up", help="start a local cluster on embedded defaults")
    node = commands.add_parser("node", help="run one broker node in the foreground")
    node.add_argument("--config", help="node.toml (every option has a default)")
    node.add_argument("--data", help="data directory (overrides the config)")
    node.add_argument("--port", type=int, help="client gRPC port, 0 for any (overrides)")
    args = parser.parse_args(argv)
    if args.command == "up":
        print(
            "ferrymq: `make up` will start a local cluster once the cluster launcher exists "
            "(routing issue); a single node runs today with `ferrymq node --data DIR`.",
            file=sys.stderr,
        )
        return 2
    if args.command == "node":
        from node.config import ConfigError, load_node_config
        from node.server import serve

        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s"
        )
        try:
            config = load_node_config(args.config, data_dir=args.data, grpc_port=args.port)
        except (ConfigError, OSError) as error:
            print(f"ferrymq node: {error}", file=sys.stderr)
            return 2
        asyncio.run(serve(config))
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
