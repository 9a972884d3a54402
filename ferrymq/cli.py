"""The ``ferrymq`` command line: run a node, administer topics and groups, produce,
consume and query. Human tables by default, ``--json`` for scripts; errors go to stderr
with the node's status name and exit code 1 (2 for usage and configuration errors)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Iterator

from ferrymq.cli_output import Progress, emit_json, table

DEFAULT_SERVER = "127.0.0.1:8081"
DEMO_TOPIC = "demo"
DEMO_GROUP = "demo-group"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in ("up", "node"):
        return run_node(args)
    from ferrymq.client import FerryError

    try:
        return args.handler(args)
    except FerryError as error:
        print(f"ferrymq: {error.code_name}: {error.detail}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as error:
        print(f"ferrymq: {error}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ferrymq", description="ferrymq message broker")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--server", default=DEFAULT_SERVER, help="node address host:port")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser("up", help="start a local node with a demo topic (make up)")
    up.add_argument("--data", default="data", help="data directory (default ./data)")
    up.add_argument("--port", type=int, default=8081, help="client port, 0 for any")
    node = commands.add_parser("node", help="run one broker node in the foreground")
    node.add_argument("--config", help="node.toml (every option has a default)")
    node.add_argument("--data", help="data directory (overrides the config)")
    node.add_argument("--port", type=int, help="client gRPC port, 0 for any (overrides)")

    topic = commands.add_parser("topic", help="create, list, describe, delete topics")
    topics = topic.add_subparsers(dest="action", required=True)
    create = topics.add_parser("create", parents=[common])
    create.add_argument("name")
    create.add_argument("--queues", type=int, default=8)
    create.add_argument(
        "--type", default="NORMAL", choices=["NORMAL", "FIFO", "DELAY", "TRANSACTION"]
    )
    create.add_argument(
        "--permission", default="READ_WRITE", choices=["READ", "WRITE", "READ_WRITE"]
    )
    create.set_defaults(handler=topic_create)
    topics.add_parser("list", parents=[common]).set_defaults(handler=topic_list)
    describe = topics.add_parser("describe", parents=[common])
    describe.add_argument("name")
    describe.set_defaults(handler=topic_describe)
    delete = topics.add_parser("delete", parents=[common])
    delete.add_argument("name")
    delete.set_defaults(handler=topic_delete)

    group = commands.add_parser("group", help="consumer groups and their progress")
    groups = group.add_subparsers(dest="action", required=True)
    create = groups.add_parser("create", parents=[common])
    create.add_argument("name")
    create.add_argument("--max-attempts", type=int, default=16)
    create.add_argument("--fifo", action="store_true")
    create.set_defaults(handler=group_create)
    groups.add_parser("list", parents=[common]).set_defaults(handler=group_list)
    delete = groups.add_parser("delete", parents=[common])
    delete.add_argument("name")
    delete.set_defaults(handler=group_delete)
    progress = groups.add_parser("progress", parents=[common], help="offsets, lag, in flight")
    progress.add_argument("name")
    progress.add_argument("--topic", required=True)
    progress.set_defaults(handler=group_progress)
    members = groups.add_parser("members", parents=[common])
    members.add_argument("name")
    members.set_defaults(handler=group_members)

    produce = commands.add_parser("produce", parents=[common], help="send messages")
    produce.add_argument("topic")
    produce.add_argument("bodies", nargs="*", help="message bodies (default: stdin lines)")
    produce.add_argument("--tag")
    produce.add_argument("--key", action="append", default=[], dest="keys")
    produce.add_argument("--message-group", help="FIFO topics: the order key")
    produce.add_argument("--delay-ms", type=int, help="DELAY topics: deliver this much later")
    produce.add_argument("--count", type=int, help="send COUNT generated messages")
    produce.add_argument("--size", type=int, default=1024, help="generated body size")
    produce.add_argument("--batch", type=int, default=1, help="messages per request")
    produce.set_defaults(handler=produce_messages)

    consume = commands.add_parser("consume", parents=[common], help="read messages")
    consume.add_argument("topic")
    consume.add_argument("--group", default="", help="consumer group (offsets, commit)")
    consume.add_argument("--queue", type=int, action="append", help="only these queues")
    consume.add_argument(
        "--from",
        dest="start",
        default="committed-or-beginning",
        choices=["committed-or-beginning", "committed-or-end", "beginning", "end"],
    )
    consume.add_argument("--max", type=int, default=100, help="stop after this many")
    consume.add_argument("--wait", type=float, default=2.0, help="stop after this idle time")
    consume.add_argument("--commit", action="store_true", help="commit the group's offsets")
    consume.add_argument("--tags", default="*", help="tag filter, e.g. 'TagA || TagB'")
    consume.set_defaults(handler=consume_messages)

    query = commands.add_parser("query", parents=[common], help="find stored messages")
    query.add_argument("--topic", default="")
    what = query.add_mutually_exclusive_group(required=True)
    what.add_argument("--id", help="message id (or offset message id)")
    what.add_argument("--key", help="a key of KEYS (needs --topic)")
    what.add_argument("--offset", type=int, help="queue offset (needs --topic and --queue)")
    query.add_argument("--queue", type=int, default=0)
    query.set_defaults(handler=query_messages)

    spark = commands.add_parser("spark", help="Spark pipelines on the ferrymq data source")
    spark_actions = spark.add_subparsers(dest="action", required=True)
    spark_run = spark_actions.add_parser(
        "run",
        help="run a job on a local Spark session (Java 17+)",
        description="jobs: tag-minute-aggregates, export-parquet, replay-parquet; "
        "'ferrymq spark run JOB --help' shows a job's options",
    )
    spark_run.add_argument("job", help="tag-minute-aggregates | export-parquet | replay-parquet")
    spark_run.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    spark_run.add_argument("job_args", nargs=argparse.REMAINDER, help="the job's own options")
    spark_run.set_defaults(handler=spark_run_job)
    return parser


# ---- spark ---------------------------------------------------------------------------
def spark_run_job(args) -> int:
    from ferrymq.spark.jobs import run_job
    from ferrymq.spark.session import JavaMissing

    try:
        return run_job(args.job, args.job_args, master=args.master)
    except JavaMissing as error:
        print(f"ferrymq: {error}", file=sys.stderr)
        return 2


# ---- node ----------------------------------------------------------------------------
def run_node(args) -> int:
    from node.config import ConfigError, NodeConfig, load_node_config
    from node.server import serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if args.command == "up":
        import dataclasses

        base = NodeConfig(data_dir=args.data)
        config = dataclasses.replace(base, ports=dataclasses.replace(base.ports, grpc=args.port))
        asyncio.run(serve(config, on_ready=create_demo))
        return 0
    try:
        config = load_node_config(args.config, data_dir=args.data, grpc_port=args.port)
    except (ConfigError, OSError) as error:
        print(f"ferrymq node: {error}", file=sys.stderr)
        return 2
    asyncio.run(serve(config))
    return 0


def create_demo(node) -> None:
    """The demo topic and group of ``make up``, and how to use them."""
    from node.topics import GroupConfig, TopicConfig

    if DEMO_TOPIC not in node.topics.topics:
        node.topics.create_topic(TopicConfig(DEMO_TOPIC, queue_count=4))
    if DEMO_GROUP not in node.topics.groups:
        node.topics.create_group(GroupConfig(DEMO_GROUP))
    server = f"{node.config.host}:{node.port}"
    flag = "" if server == DEFAULT_SERVER else f" --server {server}"
    print(
        f"""
ferrymq is up: node {node.config.id} on {server}, data in {node.config.data_dir}/
topic "{DEMO_TOPIC}" (4 queues) and group "{DEMO_GROUP}" are ready. In another terminal:

  .venv/bin/ferrymq produce {DEMO_TOPIC} hello world --key greeting{flag}
  .venv/bin/ferrymq consume {DEMO_TOPIC} --group {DEMO_GROUP} --commit{flag}
  .venv/bin/ferrymq query --topic {DEMO_TOPIC} --key greeting{flag}
  .venv/bin/ferrymq group progress {DEMO_GROUP} --topic {DEMO_TOPIC}{flag}

Official RocketMQ 5 clients connect to {server} unchanged. Ctrl-C stops the node.
""",
        flush=True,
    )


# ---- topics and groups ---------------------------------------------------------------
def admin_of(args):
    from ferrymq.client import Admin

    return Admin(args.server)


def topic_create(args) -> int:
    with admin_of(args) as admin:
        created = admin.create_topic(args.name, args.queues, args.type, args.permission)
    show(args, created, f"created topic {created.name} ({created.queue_count} queues)")
    return 0


def topic_list(args) -> int:
    with admin_of(args) as admin:
        topics = admin.list_topics()
    show_table(
        args,
        topics,
        ["topic", "queues", "type", "permission"],
        [[t.name, t.queue_count, t.message_type, t.permission] for t in topics],
    )
    return 0


def topic_describe(args) -> int:
    with admin_of(args) as admin:
        topic, queues = admin.describe_topic(args.name)
    if args.json:
        emit_json({"topic": topic, "queues": queues})
        return 0
    print(f"{topic.name}: {topic.queue_count} queues, {topic.message_type}, {topic.permission}")
    print(
        table(
            ["queue", "broker group", "min offset", "max offset"],
            [[q.queue_id, q.broker_group, q.min_offset, q.max_offset] for q in queues],
        )
    )
    return 0


def topic_delete(args) -> int:
    with admin_of(args) as admin:
        admin.delete_topic(args.name)
    show(args, {"deleted": args.name}, f"deleted topic {args.name}")
    return 0


def group_create(args) -> int:
    with admin_of(args) as admin:
        created = admin.create_group(args.name, args.max_attempts, args.fifo)
    show(args, created, f"created group {created.name}")
    return 0


def group_list(args) -> int:
    with admin_of(args) as admin:
        groups = admin.list_groups()
    show_table(
        args,
        groups,
        ["group", "max attempts", "fifo"],
        [[g.name, g.max_delivery_attempts, g.fifo] for g in groups],
    )
    return 0


def group_delete(args) -> int:
    with admin_of(args) as admin:
        admin.delete_group(args.name)
    show(args, {"deleted": args.name}, f"deleted group {args.name}")
    return 0


def group_progress(args) -> int:
    with admin_of(args) as admin:
        queues = admin.group_progress(args.name, args.topic)
    rows = [
        [
            q.topic,
            q.queue_id,
            q.broker_group,
            q.broker_offset,
            q.consumer_offset,
            q.lag,
            q.in_flight,
        ]
        for q in queues
    ]
    rows.append(
        ["total", "", "", "", "", sum(q.lag for q in queues), sum(q.in_flight for q in queues)]
    )
    show_table(
        args,
        queues,
        ["topic", "queue", "broker group", "broker offset", "consumer offset", "lag", "in flight"],
        rows,
    )
    return 0


def group_members(args) -> int:
    with admin_of(args) as admin:
        members = admin.group_members(args.name)
    show_table(args, members, ["client id"], [[m] for m in members])
    return 0


# ---- messages ------------------------------------------------------------------------
def bodies_of(args) -> Iterator[bytes]:
    if args.count is not None:
        filler = b"x" * args.size
        for i in range(args.count):
            yield (b"%d:" % i + filler)[: max(args.size, 1)]
    elif args.bodies:
        yield from (b.encode() for b in args.bodies)
    else:
        yield from (line.rstrip("\n").encode() for line in sys.stdin)


def produce_messages(args) -> int:
    from ferrymq.client import Message, Producer

    if args.batch < 1:
        raise ValueError("--batch must be at least 1")
    delivery = None if args.delay_ms is None else time.time_ns() // 1_000_000 + args.delay_ms
    progress = Progress(args.count, f"produce {args.topic}")
    receipts = []
    started = time.monotonic()
    with Producer(args.server) as producer:
        batch: list = []

        def flush() -> None:
            sent = producer.send_batch(batch)
            receipts.extend(sent)
            progress.advance(len(sent))
            batch.clear()

        for body in bodies_of(args):
            batch.append(
                Message(
                    args.topic,
                    body,
                    tag=args.tag,
                    keys=list(args.keys),
                    message_group=args.message_group,
                    delivery_time_ms=delivery,
                )
            )
            if len(batch) >= args.batch:
                flush()
        if batch:
            flush()
    progress.finish()
    elapsed = time.monotonic() - started
    if args.json:
        emit_json({"sent": len(receipts), "seconds": round(elapsed, 3), "receipts": receipts})
    elif args.count is not None:
        rate = len(receipts) / max(elapsed, 1e-9)
        print(f"sent {len(receipts)} messages in {elapsed:.2f} s ({rate:,.0f}/s)")
    else:
        for receipt in receipts:
            print(f"sent {receipt.message_id} (queue offset {receipt.queue_offset})")
    return 0


def consume_messages(args) -> int:
    from ferrymq.client import PullConsumer

    got = []
    progress = Progress(args.max, f"consume {args.topic}")
    with PullConsumer(args.server, args.group, start=args.start, tags=args.tags) as consumer:
        if args.queue:
            consumer.assign(args.topic, args.queue)
        elif args.group:
            consumer.subscribe(args.topic)
        else:
            consumer.assign(args.topic, topic_queue_ids(args))
        idle_since = time.monotonic()
        while len(got) < args.max and time.monotonic() - idle_since < args.wait:
            messages = consumer.poll(wait_s=min(1.0, args.wait))
            if messages:
                idle_since = time.monotonic()
            for message in messages[: args.max - len(got)]:
                got.append(message)
                if not args.json:
                    print(
                        f"{message.topic}[{message.queue_id}]@{message.queue_offset} "
                        f"{message.message_id} tag={message.tag or ''} "
                        f"keys={','.join(message.keys)} {message.body.decode(errors='replace')}"
                    )
            progress.advance(len(messages))
        if len(got) >= args.max:
            reset_to_printed(consumer, got)
        if args.commit:
            consumer.commit()
    progress.finish()
    if args.json:
        emit_json(got)
    return 0


def reset_to_printed(consumer, got) -> None:
    """Positions just past the last printed message of each queue (a poll may have read
    further than ``--max``), so ``--commit`` commits exactly what was shown."""
    last: dict[int, int] = {}
    for message in got:
        last[message.queue_id] = max(last.get(message.queue_id, -1), message.queue_offset)
    for queue_id, offset in last.items():
        consumer.seek(queue_id, offset + 1)


def topic_queue_ids(args) -> list[int]:
    with admin_of(args) as admin:
        topic, _ = admin.describe_topic(args.topic)
    return list(range(topic.queue_count))


def query_messages(args) -> int:
    with admin_of(args) as admin:
        if args.id:
            found = admin.query_by_id(args.id, args.topic)
        elif args.key:
            if not args.topic:
                raise ValueError("--key needs --topic")
            found = admin.query_by_key(args.topic, args.key)
        else:
            if not args.topic:
                raise ValueError("--offset needs --topic")
            found = admin.query_by_offset(args.topic, args.queue, args.offset)
    show_table(
        args,
        found,
        ["topic", "queue", "offset", "message id", "tag", "keys", "stored", "body"],
        [
            [
                m.topic,
                m.queue_id,
                m.queue_offset,
                m.message_id,
                m.tag,
                m.keys,
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(m.store_timestamp_ms / 1000)),
                m.body,
            ]
            for m in found
        ],
    )
    return 0 if found else 1


# ---- output --------------------------------------------------------------------------
def show(args, value, text: str) -> None:
    if args.json:
        emit_json(value)
    else:
        print(text)


def show_table(args, values, headers, rows) -> None:
    if args.json:
        emit_json(values)
    elif rows:
        print(table(headers, rows))
    else:
        print("(none)")


if __name__ == "__main__":
    sys.exit(main())
