"""The node's entry point: ``python -m node`` and ``ferrymq node`` both run ``run``.

It lives in the node so that the node never imports the command line: the CLI adds these
options to its ``node`` command and calls ``run``. Only the standard library is imported
here; the node's modules are imported when a node starts, so building the CLI's parser
does not load the broker.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of one node, on ``parser``."""
    parser.add_argument("--config", help="node.toml (every option has a default)")
    parser.add_argument("--data", help="data directory (overrides the config)")
    parser.add_argument("--port", type=int, help="client gRPC port, 0 for any (overrides)")
    parser.add_argument(
        "--remoting-port", type=int, help="RocketMQ 4.x remoting port, 0 for any (overrides)"
    )
    parser.add_argument(
        "--metrics-port", type=int, help="Prometheus /metrics port, 0 for any (overrides)"
    )


def run(args: argparse.Namespace) -> int:
    """Run one node in the foreground until it stops; the exit code (2 for a bad
    configuration, 1 when it cannot start)."""
    import uvloop

    from node.call_count import ENV as CALL_COUNT_ENV
    from node.call_count import install_from_env as install_call_count
    from node.config import ConfigError, load_node_config
    from node.process_tuning import tune_process
    from node.server import serve
    from node.stretch_time import ENV as STRETCH_TIME_ENV
    from node.stretch_time import install_from_env as install_stretch_time

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        config = load_node_config(
            args.config,
            data_dir=args.data,
            grpc_port=args.port,
            remoting_port=getattr(args, "remoting_port", None),
            metrics_port=getattr(args, "metrics_port", None),
        )
    except (ConfigError, OSError) as error:
        print(f"ferrymq node: {error}", file=sys.stderr)
        return 2
    from node.handle_key import HandleKeyError
    from routing.replica import RoutingUnavailable
    from store.errors import RecoveryRefused

    if os.environ.get(CALL_COUNT_ENV) and os.environ.get(STRETCH_TIME_ENV):
        print(
            f"ferrymq node: {CALL_COUNT_ENV} and {STRETCH_TIME_ENV} are both set: "
            "one at a time (each writes on SIGUSR2)",
            file=sys.stderr,
        )
        return 2
    tune_process()
    install_call_count()  # off unless FERRYMQ_CALL_COUNT is set (bench.calls)
    install_stretch_time()  # off unless FERRYMQ_STRETCH_TIME is set (bench.calls --time)
    try:
        # uvloop: a framed round trip costs a third of the default loop's here, and grpc.aio
        # runs on it unchanged (docs/architecture.md, "Remoting").
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve(config))
    except (RoutingUnavailable, HandleKeyError, RecoveryRefused) as error:
        print(f"ferrymq node: {error}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m node [--config FILE] [--data DIR] [--port N] [--remoting-port N]
    [--metrics-port N]``."""
    parser = argparse.ArgumentParser(prog="python -m node", description="run one broker node")
    add_arguments(parser)
    return run(parser.parse_args(argv))
