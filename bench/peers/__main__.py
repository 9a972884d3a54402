"""``python -m bench.peers [--json] [--quick | --smoke] [--only PARTS,SYSTEMS] [--drills N]``:
ferrymq side by side with NATS JetStream, Redis Streams, RabbitMQ quorum queues, Apache
Kafka and Apache RocketMQ, each a 3-node group started here (the JVM peers from Maven
Central artifacts, ``bench.peers.jvm``).

Four parts: ``workloads`` (five workloads, every system), ``failover`` (kill -9 of the
master under a steady producer and consumer: time until sends succeed again, acknowledged
messages lost; ``bench.peers.drills``), ``backlog`` and ``topics`` (how the cost grows with
the work: a backlog of 1 and 4 GiB read hot and cold, throughput over 1 to 10,000 topics;
``bench.peers.growth``), the last three for ferrymq, Kafka and Apache RocketMQ (failover
also through the official client against ferrymq, and for Apache RocketMQ a second time
with every failover period at its shortest).

With a system Python in a fresh clone it first sets up ``.venv`` (the ``bench`` extra)
and re-executes itself there, and apt-installs the peers' Debian packages that are
missing. Progress goes to stderr; stdout carries one JSON object: every figure, the
ratios ferrymq / best peer (``ratio_*``, above 1 means ferrymq is faster) and whether the
targets are met. Unless ``--no-write``, the table goes to bench/RESULTS.md and the chart
to bench/peers.png.
"""

from __future__ import annotations

import argparse
import sys

from bench.peers import bootstrap


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__)
    parser.add_argument("--json", action="store_true", help="no per-figure table on stderr")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="a few minutes in all")
    size.add_argument("--smoke", action="store_true", help="a handful of messages each")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated parts (workloads, failover, backlog, topics) and/or systems "
        "(ferrymq, ferrymq-official, nats, redis, rabbitmq, kafka, rocketmq, "
        "rocketmq-shortest); none of either means all",
    )
    parser.add_argument(
        "--drills", type=int, default=0, help="failover drills per system (5; smoke 1)"
    )
    parser.add_argument(
        "--results", default="", help="write the section into this file, not bench/RESULTS.md"
    )
    parser.add_argument("--no-install", action="store_true", help="never apt-get install")
    parser.add_argument(
        "--no-write", action="store_true", help="leave bench/RESULTS.md and the chart alone"
    )
    return parser.parse_args(argv)


def main() -> None:
    args = parse(sys.argv[1:])
    bootstrap.ensure_environment(sys.argv[1:])
    from bench.peers.run import run  # needs the packages ensure_environment provides

    raise SystemExit(run(args))


if __name__ == "__main__":
    main()
