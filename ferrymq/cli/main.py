"""The ``ferrymq`` command line: run a node, administer topics and groups, produce,
consume and query. Human tables by default, ``--json`` for scripts; errors go to stderr
with the node's status name and exit code 1 (2 for usage and configuration errors)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import signal
import sys
import time
from collections.abc import Iterator

from ferrymq.cli.output import Progress, admin_of, emit_json, show, show_table, table
from ferrymq.cli.security import add_connection_options, add_security_commands

DEFAULT_SERVER = "127.0.0.1:8081"
DEMO_TOPIC = "demo"
DEMO_GROUP = "demo-group"
DAMAGED_LOG = "DAMAGED (cut by recovery, not refilled)"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "node":
        from node.run import run

        return run(args)
    from ferrymq.cli.security import apply_connection_options
    from ferrymq.client import FerryError
    from ferrymq.launcher.cluster import ClusterError

    apply_connection_options(args)
    try:
        return args.handler(args)
    except FerryError as error:
        print(f"ferrymq: {error.code_name}: {error.detail}", file=sys.stderr)
        return 1
    except ClusterError as error:
        print(f"ferrymq: {error}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as error:
        print(f"ferrymq: {error}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ferrymq", description="ferrymq message broker")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--server", default=DEFAULT_SERVER, help="node address host:port")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    add_connection_options(common)
    commands = parser.add_subparsers(dest="command", required=True)

    up = commands.add_parser(
        "up", help="run a local 3-node cluster with a demo topic until Ctrl-C (make up)"
    )
    up.add_argument("--data", default="data", help="cluster directory (default ./data)")
    up.add_argument(
        "--free-ports", action="store_true", help="OS-chosen ports instead of 8081, 8082, ..."
    )
    up.set_defaults(handler=run_up)
    cluster = commands.add_parser("cluster", help="a local cluster of node processes")
    clusters = cluster.add_subparsers(dest="action", required=True)
    cluster_start = clusters.add_parser("up", help="start (or restart) a local cluster")
    cluster_start.add_argument("--nodes", type=int, default=3)
    cluster_start.add_argument("--groups", type=int, default=1, help="broker groups")
    cluster_start.add_argument("--voters", type=int, default=3, choices=[1, 3, 5])
    cluster_start.add_argument("--data", required=True, help="cluster directory")
    cluster_start.add_argument("--free-ports", action="store_true")
    cluster_start.add_argument("--json", action="store_true")
    cluster_start.set_defaults(handler=cluster_start_command)
    cluster_status = clusters.add_parser("status", parents=[common])
    cluster_status.add_argument("--data", help="cluster directory (instead of --server)")
    cluster_status.set_defaults(handler=cluster_status_command)
    finalize = clusters.add_parser(
        "finalize-upgrade",
        parents=[common],
        help="the last step of a rolling upgrade: routing writes its newest format "
        "(refused until every node runs this release; no downgrade after it)",
    )
    finalize.add_argument("--data", help="cluster directory (instead of --server)")
    finalize.set_defaults(handler=finalize_upgrade_command)
    node_config = clusters.add_parser(
        "config",
        parents=[common],
        help="a node's configuration as it runs, by section and under RocketMQ's names "
        "(admin rights; secrets shown only as set)",
    )
    node_config.add_argument("--node", default="", help="node id (default: the node asked)")
    node_config.add_argument("--data", help="cluster directory (instead of --server)")
    node_config.set_defaults(handler=node_config_command)
    cluster_stop = clusters.add_parser("down", help="stop a local cluster cleanly")
    cluster_stop.add_argument("--data", required=True, help="cluster directory")
    cluster_stop.set_defaults(handler=cluster_stop_command)
    chaos = commands.add_parser("chaos", help="fault-injection runs checked against the promises")
    chaos_run = chaos.add_subparsers(dest="action", required=True).add_parser("run")
    chaos_run.add_argument("--mode", required=True, help="sync-sync-flush, async-async-flush...")
    chaos_run.add_argument("--faults", default="kill,pause", help="kill,pause,restart-all,...")
    chaos_run.add_argument("--duration", default="60s", help="e.g. 90s, 5m")
    chaos_run.add_argument("--data", default="chaos-run", help="run directory (report.json...)")
    chaos_run.add_argument(
        "--rounds", type=int, default=1, help="go on past --duration until each fault ran N times"
    )
    chaos_run.add_argument(
        "--keep-data",
        action="store_true",
        help="keep the nodes' data directories under --data (for a post-mortem)",
    )
    chaos_run.set_defaults(handler=chaos_run_command)
    from node.run import add_arguments as add_node_arguments

    add_node_arguments(commands.add_parser("node", help="run one broker node in the foreground"))

    failover = commands.add_parser(
        "failover", parents=[common], help="move a broker group's mastership (planned switchover)"
    )
    failover.add_argument("--group", required=True, help="broker group")
    failover.add_argument("--to", default="", help="target node (default: most caught up)")
    failover.set_defaults(handler=failover_command)
    rollback = commands.add_parser(
        "rollback",
        help="messages a node cut from its log and kept aside: when it rejoined a new master "
        "(rollback files) or when recovery found an invalid record (damaged ranges)",
    )
    rollback.add_argument("--data", required=True, help="the node's data directory")
    rollback.add_argument("--json", action="store_true", help="machine-readable output")
    rollback.add_argument(
        "--resend",
        action="store_true",
        help="send them again through --server as their producers sent them (same ids and "
        "delivery times), except damaged-range records the log holds again (refilled from "
        "a master); exit 1 if the node refused any",
    )
    rollback.add_argument("--server", default=DEFAULT_SERVER, help="node address for --resend")
    add_connection_options(rollback)
    rollback.set_defaults(handler=rollback_command)
    topic = commands.add_parser("topic", help="create, list, describe, delete topics")
    topics = topic.add_subparsers(dest="action", required=True)
    create = topics.add_parser("create", parents=[common])
    create.add_argument("name")
    create.add_argument("--queues", type=int, default=8)
    create.add_argument(
        "--type",
        default="ANY",
        choices=["ANY", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "PRIORITY", "LITE"],
        help="what the topic takes (default ANY: every type, as in RocketMQ 5)",
    )
    create.add_argument(
        "--permission", default="READ_WRITE", choices=["READ", "WRITE", "READ_WRITE"]
    )
    create.add_argument(
        "--groups", default="", help="broker groups to host it, comma-separated (default all)"
    )
    create.add_argument(
        "--lite-expiration-minutes",
        type=int,
        default=-1,
        help="LITE topics: delete a lite topic that has had no new message for this long "
        "(RocketMQ's lite.topic.expiration, at most 43200; default -1: never)",
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
    create.add_argument(
        "--lite-exclusive",
        action="store_true",
        help="each lite topic has one subscriber in the group, the newest (RocketMQ 5.5's "
        "Exclusive lite subscription model)",
    )
    create.set_defaults(handler=group_create)
    update = groups.add_parser(
        "update",
        parents=[common],
        help="change an existing group in place (what is not named stays as it is)",
    )
    update.add_argument("name")
    update.add_argument(
        "--max-attempts",
        type=int,
        default=None,
        help="a lower value counts at each message's next delivery",
    )
    update.add_argument(
        "--fifo",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ordered delivery per queue, from the next receive",
    )
    update.add_argument(
        "--lite-exclusive",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="one subscriber per lite topic, from the next lite subscription",
    )
    update.set_defaults(handler=group_update)
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
    reset = groups.add_parser(
        "reset-offsets",
        parents=[common],
        help="move the group's offsets on every queue of a topic to a time, or to the "
        "earliest or latest message (admin)",
    )
    reset.add_argument("name")
    reset.add_argument("--topic", required=True)
    reset.add_argument(
        "--to",
        required=True,
        dest="reset_to",
        help="an ISO-8601 time (2026-11-30T22:15:00+01:00; UTC without an offset), ms since "
        "the epoch, 'earliest' or 'latest'",
    )
    reset.add_argument(
        "--dry-run", action="store_true", help="show where each queue would go; change nothing"
    )
    reset.set_defaults(handler=group_reset_offsets)
    dead = groups.add_parser(
        "dead-letters",
        parents=[common],
        help="the group's dead-letter queue on a broker group, and what was resent",
    )
    dead.add_argument("name")
    dead.add_argument("--broker-group", default="", help="default: the access point's")
    dead.add_argument("--from", type=int, default=-1, dest="from_offset", help="default: the last")
    dead.add_argument("--limit", type=int, default=50, help="1..200 entries")
    dead.set_defaults(handler=group_dead_letters)
    resend = groups.add_parser(
        "resend-dlq",
        parents=[common],
        help="give dead letters back to the group (its POP and 4.x push consumers, no other "
        "group), each with its message id and a fresh attempt count; resent ones are skipped",
    )
    resend.add_argument("name")
    resend.add_argument("--broker-group", default="", help="default: the access point's")
    chosen = resend.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--offsets", help="DLQ offsets, comma-separated: 3,5,8")
    chosen.add_argument("--from", type=int, dest="from_offset", help="every one from this offset")
    resend.add_argument("--to", type=int, dest="to_offset", help="... to this one (inclusive)")
    resend.set_defaults(handler=group_resend_dlq)

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

    message = commands.add_parser("message", help="one stored message")
    message_actions = message.add_subparsers(dest="action", required=True)
    history = message_actions.add_parser(
        "history",
        parents=[common],
        help="its delivery history per consumer group (deliveries, attempts, acks, retry "
        "and dead-letter copies), read at its broker group's master",
    )
    history.add_argument("--topic", required=True)
    history.add_argument("--queue", type=int, required=True)
    history.add_argument("--offset", type=int, required=True, help="the queue offset")
    history.add_argument(
        "--broker-group", default="", help="the queue's broker group (when several hold it)"
    )
    history.set_defaults(handler=message_history)
    direct = message_actions.add_parser(
        "consume-directly",
        parents=[common],
        help="have one online client of a group run its listener on a stored message "
        "(RocketMQ Dashboard's resend to a group; nothing is stored); ask the node the "
        "client is connected to",
    )
    direct.add_argument("--topic", required=True)
    direct.add_argument("--group", required=True)
    named = direct.add_mutually_exclusive_group(required=True)
    named.add_argument("--id", dest="message_id", help="its message id or unique key")
    named.add_argument("--physical-offset", type=int, help="its CommitLog offset")
    direct.add_argument("--client-id", default="", help="default: any member that can")
    direct.add_argument("--timeout-ms", type=int, default=0, help="default 15000")
    direct.set_defaults(handler=message_consume_directly)

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
    add_security_commands(commands, common)
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


def rollback_command(args) -> int:
    """Read what a node cut from its log and kept aside, offline (``rollback_listing.py``):
    rollback files (under ASYNC replication, the messages a failover lost from the cluster)
    and damaged ranges (what recovery cut after an invalid record)."""
    from ferrymq.cli import rollback_listing as listing

    if not os.path.isdir(args.data):
        raise ValueError(f"{args.data} is not a directory")
    ranges = listing.damaged_ranges(args.data)
    if args.resend:
        return resend_rolled_back(args, ranges)
    rows = listing.rows(args.data, ranges)
    if not args.json:
        for kept in ranges:
            print(listing.summary(kept))
    show_table(args, rows, listing.TABLE_HEADERS, [listing.table_row(r) for r in rows])
    return 0


def resend_rolled_back(args, ranges) -> int:
    """Send a node's rolled-back messages and the still valid records of its damaged
    ranges again (``ferrymq/cli/rollback_resend.py``), but not what its log holds again; exit
    1 when the node refused any of them."""
    from ferrymq.cli.rollback_listing import resendable
    from ferrymq.cli.rollback_resend import SKIPPED_REFILLED, plan_resend, resend
    from ferrymq.client import Producer
    from ha import rollback

    records = [m for path in rollback.rollback_files(args.data) for m in rollback.records_in(path)]
    missing, held = resendable(args.data, ranges)
    plan = plan_resend(records + missing)
    if held:
        plan.skipped[SKIPPED_REFILLED] += held
    with Producer(args.server) as producer:
        sent, failures = resend(producer, plan.messages)
    if args.json:
        emit_json(
            {
                "sent": sent,
                "not_sent": dict(plan.skipped),
                "refused": [vars(f) for f in failures],
            }
        )
    else:
        print(f"sent {sent} messages again")
        for reason, count in plan.skipped.items():
            print(f"not sent: {count} {reason}")
        for failure in failures:
            print(f"refused: {failure.message_id} ({failure.topic}): {failure.error}")
    return 1 if failures else 0


def run_up(args) -> int:
    """``make up``: a 3-node cluster under ./data with the demo topic and group, in the
    foreground; Ctrl-C (or SIGTERM) stops it cleanly."""
    import signal

    from ferrymq.client import Admin, FerryError
    from ferrymq.launcher.cluster import cluster_down, cluster_up

    print(f"starting a 3-node cluster in {args.data}/ ...", flush=True)
    plan = cluster_up(args.data, nodes=3, auto_ports=args.free_ports)
    server = plan.nodes[0].grpc
    with Admin(server) as admin:
        for create in (
            lambda: admin.create_topic(DEMO_TOPIC, 4),
            lambda: admin.create_group(DEMO_GROUP),
        ):
            try:
                create()
            except FerryError as error:
                if error.code_name != "ALREADY_EXISTS":
                    raise
    flag = "" if server == DEFAULT_SERVER else f" --server {server}"
    print(
        table(
            ["node", "group", "client", "remoting", "raft", "pid"],
            [[n.id, n.group, n.grpc, n.remoting, n.raft, n.pid] for n in plan.nodes],
        )
    )
    print(
        f"""
ferrymq is up: 3 nodes, data and logs in {plan.directory}/, endpoints in cluster.json
topic "{DEMO_TOPIC}" (4 queues) and group "{DEMO_GROUP}" are ready. In another terminal:

  .venv/bin/ferrymq produce {DEMO_TOPIC} hello world --key greeting{flag}
  .venv/bin/ferrymq consume {DEMO_TOPIC} --group {DEMO_GROUP} --commit{flag}
  .venv/bin/ferrymq query --topic {DEMO_TOPIC} --key greeting{flag}
  .venv/bin/ferrymq group progress {DEMO_GROUP} --topic {DEMO_TOPIC}{flag}
  .venv/bin/ferrymq cluster status --data {args.data}

Official RocketMQ 5 clients connect to {server} unchanged; RocketMQ 4.x clients use
namesrvAddr={plan.namesrv_addr} (any one of them will do). Ctrl-C stops the cluster.
""",
        flush=True,
    )
    stop = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    signal.sigwait(stop)
    stopped = cluster_down(args.data)
    print(f"stopped {', '.join(stopped) or 'nothing'}", flush=True)
    return 0


def cluster_start_command(args) -> int:
    from ferrymq.launcher.cluster import cluster_up

    plan = cluster_up(args.data, args.nodes, args.groups, args.voters, auto_ports=args.free_ports)
    if args.json:
        emit_json(plan.to_json()["nodes"])
        return 0
    print(
        table(
            [
                "node",
                "group",
                "role",
                "client",
                "remoting",
                "metrics",
                "replication",
                "raft",
                "pid",
            ],
            [
                [n.id, n.group, n.role, n.grpc, n.remoting, n.metrics, n.ha, n.raft, n.pid]
                for n in plan.nodes
            ],
        )
    )
    print(f"cluster ready; endpoints in {plan.directory}/cluster.json")
    print(f"RocketMQ 4.x clients: namesrvAddr={plan.namesrv_addr}")
    return 0


def on_first_answering_node(args, call):
    """``call(admin)`` on the first node of ``--data``'s cluster (or ``--server``) that
    answers."""
    from ferrymq.launcher.cluster import ClusterError, load_plan, on_first_answering

    servers = [args.server]
    if getattr(args, "data", None):
        plan = load_plan(args.data)
        if plan is None:
            raise ClusterError(f"no cluster.json in {args.data}")
        servers = [n.grpc for n in plan.nodes]
    return on_first_answering(servers, call)


def node_config_command(args) -> int:
    """``ferrymq cluster config [--node ID]``: the options table, then RocketMQ's names."""
    info = on_first_answering_node(args, lambda admin: admin.node_config(args.node))
    if args.json:
        emit_json(info)
        return 0
    print(f"node {info.node_id}, broker group {info.broker_group}")
    print(
        table(["section", "option", "value"], [[s.section, s.name, s.value] for s in info.settings])
    )
    print()
    print(table(["RocketMQ property", "value"], sorted(info.broker_properties.items())))
    return 0


def finalize_upgrade_command(args) -> int:
    routing_format = on_first_answering_node(args, lambda admin: admin.finalize_upgrade())
    show(
        args,
        {"routing_format": routing_format},
        f"routing writes format {routing_format} from now on: the upgrade is final",
    )
    return 0


def cluster_status_command(args) -> int:
    status = on_first_answering_node(args, lambda admin: admin.cluster_status())
    if args.json:
        emit_json(status)
        return 0
    leader = status.raft_leader or "(none)"
    print(
        f"routing: leader {leader}, term {status.raft_term}, commit index "
        f"{status.raft_commit_index}, format {status.routing_format} "
        f"(as seen by {status.answered_by})"
    )
    print(
        table(
            ["voter", "reachable", "leader"],
            [[v.address, v.reachable, v.leader] for v in status.voters],
        )
    )
    print()
    print(
        table(
            ["broker group", "master", "epoch", "in sync"],
            [[g.name, g.master or "-", g.epoch, ",".join(g.in_sync)] for g in status.broker_groups],
        )
    )
    print()
    print(
        table(
            ["node", "group", "role", "address", "alive", "max offset", "log", "version"],
            [
                [
                    n.id,
                    n.broker_group,
                    n.role,
                    n.address,
                    n.alive,
                    n.max_offset,
                    DAMAGED_LOG if n.damaged_log else "whole",
                    n.software_version or "0.1.0",
                ]
                for n in status.nodes
            ],
        )
    )
    damaged = [n.id for n in status.nodes if n.damaged_log]
    if damaged:
        print(
            f"\n{', '.join(damaged)}: recovery cut the log after an invalid record; the bytes "
            "are kept (ferrymq rollback --data DIR on that node) and a slave refills the "
            "range from its master"
        )
    return 0


def failover_command(args) -> int:
    with admin_of(args) as admin:
        new_master, epoch, paused_ms = admin.failover(args.group, args.to)
    show(
        args,
        {
            "broker_group": args.group,
            "master": new_master,
            "epoch": epoch,
            "writes_unavailable_ms": paused_ms,
        },
        f"{args.group}: master is now {new_master} (epoch {epoch}); "
        f"writes were paused for {paused_ms} ms",
    )
    return 0


def cluster_stop_command(args) -> int:
    from ferrymq.launcher.cluster import cluster_down

    stopped = cluster_down(args.data)
    print(f"stopped {', '.join(stopped) or 'nothing (no node was running)'}")
    return 0


# ---- topics and groups ---------------------------------------------------------------
def topic_create(args) -> int:
    with admin_of(args) as admin:
        groups = tuple(g for g in args.groups.split(",") if g)
        created = admin.create_topic(
            args.name,
            args.queues,
            args.type,
            args.permission,
            groups,
            args.lite_expiration_minutes,
        )
    where = ", ".join(created.broker_groups)
    show(args, created, f"created topic {created.name} ({created.queue_count} queues on {where})")
    return 0


def topic_list(args) -> int:
    with admin_of(args) as admin:
        topics = admin.list_topics()
    show_table(
        args,
        topics,
        ["topic", "queues", "type", "permission", "broker groups"],
        [
            [t.name, t.queue_count, t.message_type, t.permission, ",".join(t.broker_groups)]
            for t in topics
        ],
    )
    return 0


def topic_describe(args) -> int:
    with admin_of(args) as admin:
        topic, queues = admin.describe_topic(args.name)
    if args.json:
        emit_json({"topic": topic, "queues": queues})
        return 0
    line = f"{topic.name}: {topic.queue_count} queues, {topic.message_type}, {topic.permission}"
    if topic.message_type == "LITE":
        minutes = topic.lite_expiration_minutes
        line += f", lite topics expire after {minutes} min idle" if minutes > 0 else ""
    print(line)
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
        created = admin.create_group(args.name, args.max_attempts, args.fifo, args.lite_exclusive)
    show(args, created, f"created group {created.name}")
    return 0


def group_update(args) -> int:
    if args.max_attempts is None and args.fifo is None and args.lite_exclusive is None:
        raise ValueError("name what to change: --max-attempts, --[no-]fifo, --[no-]lite-exclusive")
    with admin_of(args) as admin:
        updated = admin.update_group(args.name, args.max_attempts, args.fifo, args.lite_exclusive)
    show(
        args,
        updated,
        f"updated group {updated.name}: max attempts {updated.max_delivery_attempts}, "
        f"fifo {str(updated.fifo).lower()}, lite exclusive {str(updated.lite_exclusive).lower()}",
    )
    return 0


def group_list(args) -> int:
    with admin_of(args) as admin:
        groups = admin.list_groups()
    show_table(
        args,
        groups,
        ["group", "max attempts", "fifo", "lite exclusive"],
        [[g.name, g.max_delivery_attempts, g.fifo, g.lite_exclusive] for g in groups],
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


def reset_point(text: str) -> int | str:
    """``--to``: 'earliest', 'latest', ms since the epoch, or an ISO-8601 time (UTC when
    it names no offset); ``ValueError`` for anything else."""
    text = text.strip()
    if text in ("earliest", "latest"):
        return text
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"--to {text!r} is not a time: an ISO-8601 time (2026-11-30T22:15:00Z), ms since "
            "the epoch, 'earliest' or 'latest'"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def group_reset_offsets(args) -> int:
    point = reset_point(args.reset_to)
    with admin_of(args) as admin:
        queues = admin.reset_offsets(args.name, args.topic, point, dry_run=args.dry_run)
    rows = [
        [q.broker_group, q.queue_id, "-" if q.old_offset < 0 else q.old_offset, q.new_offset]
        for q in queues
    ]
    show_table(args, queues, ["broker group", "queue", "old offset", "new offset"], rows)
    if args.dry_run and not args.json:
        print("dry run: nothing was changed")
    return 0


def group_dead_letters(args) -> int:
    with admin_of(args) as admin:
        page = admin.dead_letters(args.name, args.broker_group, args.from_offset, args.limit)
    rows = [
        [e.offset, e.message_id, e.origin_topic, e.tags, e.attempts, "yes" if e.resent else ""]
        for e in page.entries
    ]
    headers = ["offset", "message id", "topic", "tags", "attempts", "resent"]
    show_table(args, page, headers, rows)
    if not args.json:
        print(f"broker group {page.broker_group}: offsets {page.min_offset}..{page.max_offset - 1}")
    return 0


def resend_selection(args) -> tuple[tuple[int, ...], int, int]:
    """``--offsets`` or ``--from``/``--to``: (offsets, from, to); ``ValueError`` otherwise."""
    if args.offsets is not None:
        try:
            offsets = tuple(int(part) for part in args.offsets.split(",") if part.strip())
        except ValueError:
            raise ValueError(f"--offsets {args.offsets!r}: offsets separated by commas") from None
        if args.to_offset is not None:
            raise ValueError("--to goes with --from, not with --offsets")
        return offsets, -1, -1
    if args.to_offset is None:
        raise ValueError("--from needs --to (the last offset to resend)")
    return (), args.from_offset, args.to_offset


def group_resend_dlq(args) -> int:
    offsets, first, last = resend_selection(args)
    with admin_of(args) as admin:
        outcome = admin.resend_dead_letters(args.name, offsets, first, last, args.broker_group)
        while outcome.not_yet:  # one call's byte bound: the rest in the next calls
            more = admin.resend_dead_letters(
                args.name, outcome.not_yet, broker_group=outcome.broker_group
            )
            outcome = dataclasses.replace(
                outcome,
                resent=outcome.resent + more.resent,
                already_resent=outcome.already_resent + more.already_resent,
                not_yet=more.not_yet,
            )
    rows = [[outcome.broker_group, len(outcome.resent), len(outcome.already_resent)]]
    show_table(args, outcome, ["broker group", "resent", "already resent (skipped)"], rows)
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
            consumer.assign(args.topic, topic_queues(consumer, args.topic))
        idle_since = time.monotonic()
        while len(got) < args.max and time.monotonic() - idle_since < args.wait:
            messages = consumer.poll(wait_s=min(1.0, args.wait))
            if messages:
                idle_since = time.monotonic()
            for message in messages[: args.max - len(got)]:
                got.append(message)
                if not args.json:
                    print(
                        f"{message.topic}[{message.broker_group}/{message.queue_id}]"
                        f"@{message.queue_offset} "
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
    from ferrymq.client.routes import QueueRef

    last: dict[QueueRef, int] = {}
    for message in got:
        queue = QueueRef(message.broker_group, message.queue_id)
        last[queue] = max(last.get(queue, -1), message.queue_offset)
    for queue, offset in last.items():
        consumer.seek(queue, offset + 1)


def topic_queues(consumer, topic: str) -> list:
    """Every queue of ``topic``, in every broker group."""
    return list(consumer.endpoints.route(topic).queues)


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


def message_consume_directly(args) -> int:
    with admin_of(args) as admin:
        done = admin.consume_directly(
            args.group,
            args.topic,
            args.message_id or "",
            args.physical_offset,
            args.client_id,
            args.timeout_ms,
        )
    answer = f" ({done.client_answer})" if done.client_answer else ""
    remark = f": {done.remark}" if done.remark else ""
    show(
        args,
        done,
        f"{done.outcome}{answer}{remark}; client {done.client_id} ({done.protocol}), "
        f"message {done.message_id}, answered in {done.waited_ms} ms",
    )
    return 0 if done.outcome == "consumed" else 1


def message_history(args) -> int:
    with admin_of(args) as admin:
        found = admin.message_history(args.topic, args.queue, args.offset, args.broker_group)
    if args.json:
        emit_json(found)
        return 0
    stored = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(found.store_timestamp_ms / 1000))
    print(
        f"{found.topic} queue {found.queue_id} offset {found.queue_offset} on "
        f"{found.broker_group}, stored {stored}"
    )
    if not found.groups:
        print("no consumer group has a position in this queue")
    else:
        print(table(["group", "state"], [[g.group, g.state_text] for g in found.groups]))
    rows = [
        [
            g.group,
            time.strftime("%H:%M:%S", time.localtime(e.time_ms / 1000))
            + f".{e.time_ms % 1000:03d}",
            e.kind,
            e.attempt or "",
            e.detail,
        ]
        for g in found.groups
        for e in g.events
    ]
    if rows:
        print(table(["group", "time", "event", "attempt", "detail"], rows))
    if found.truncated:
        print(f"history truncated after {found.records_max} records")
    return 0


# ---- output --------------------------------------------------------------------------
def chaos_run_command(args) -> int:
    from chaos import runner

    # SIGTERM unwinds like Ctrl-C, so the nodes stop and the namespaces go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    duration_s = runner.parse_duration(args.duration)
    result = runner.run(
        args.mode, faults, duration_s, args.data, rounds=args.rounds, keep_data=args.keep_data
    )
    print(result["summary"], end="")
    print(f"report: {args.data}/report.json, summary.txt, timeline.png")
    return 0 if result["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
