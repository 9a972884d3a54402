"""The web console's API on a big cluster: ``python -m bench.console --json [--quick]``.

Starts a 3-node cluster (one broker group, auth on, the console on every node), creates
10,000 topics (4 queues each) and 1,000 consumer groups (``--quick``: 1,000 and 100;
``--smoke``: 50 and 10, the tests' end-to-end run), gives
every group a POP position on a busy topic (so the busy topic's page lists 1,000 consuming
groups and its messages' histories scan their POP records), dead-letters 50 messages of one
more group, then logs in to the master's console as the page does and times each API
call a page makes, one at a time (what a person's browser does), ``--requests`` times each:
p50, p99 and max in ms. The issue's target is 200 ms at p99 for every page. Prints one
JSON object (last line).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from ferrymq.client import Admin, ClientSecurity, Message, Producer, SimpleConsumer
from ferrymq.launcher.cluster import cluster_down, cluster_up
from ferrymq.launcher.console import ConsoleClient, console_of
from ferrymq.launcher.polling import until

CREATE_THREADS = 8  # routing commits in flight while topics and groups are made
BUSY_TOPIC = "bench-busy"
DEAD_GROUP = "bench-dead-letters"
DEAD_LETTERS = 50
TARGET_P99_MS = 200.0
ROOT = ClientSecurity("root", "root-secret-key")
SETTINGS = {
    "security": {"auth": True, "admin_access_key": "root", "admin_secret_key": "root-secret-key"},
    "console": {"enabled": True, "port": 0},
}


def create_all(address: str, security: ClientSecurity, names: list[str], group: bool) -> float:
    """Seconds to create ``names`` (topics of 4 queues, or groups) over a few Admin clients."""

    def create(chunk: list[str]) -> None:
        with Admin(address, security=security, timeout_s=60) as admin:
            for name in chunk:
                if group:
                    admin.create_group(name)
                else:
                    admin.create_topic(name, 4)

    chunks = [names[i::CREATE_THREADS] for i in range(CREATE_THREADS)]
    started = time.perf_counter()
    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(pool.map(create, chunks))
    return time.perf_counter() - started


def give_groups_positions(address: str, groups: list[str]) -> None:
    """A POP position (one message in flight) for every group on the busy topic."""

    def receive(chunk: list[str]) -> None:
        for group in chunk:
            with SimpleConsumer(address, group, BUSY_TOPIC, security=ROOT) as consumer:
                consumer.receive(1, invisible_s=3600, wait_s=1)

    with ThreadPoolExecutor(CREATE_THREADS) as pool:
        list(pool.map(receive, [groups[i::CREATE_THREADS] for i in range(CREATE_THREADS)]))


def dead_letter_some(address: str) -> None:
    """``DEAD_LETTERS`` messages of the busy topic dead-lettered by ``DEAD_GROUP`` (one
    attempt each: the receive after its invisibility ends moves it to the DLQ)."""
    with Admin(address, security=ROOT) as admin:
        admin.create_group(DEAD_GROUP, max_delivery_attempts=1)
        with SimpleConsumer(address, DEAD_GROUP, BUSY_TOPIC, security=ROOT) as consumer:
            taken = 0
            while taken < DEAD_LETTERS:
                taken += len(consumer.receive(min(32, DEAD_LETTERS - taken), invisible_s=1))

            def all_dead() -> bool:
                consumer.receive(32, invisible_s=3600, wait_s=0.2)
                return len(admin.dead_letters(DEAD_GROUP, limit=200).entries) >= DEAD_LETTERS

            until(all_dead, 30, "the dead letters")


def timed(client: ConsoleClient, path: str, requests: int) -> dict:
    """p50, p99 and max of ``GET path`` in ms, after one untimed call."""
    first = client.request("GET", path)
    assert first.status == 200, (path, first.status, first.body)
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        answer = client.request("GET", path)
        times.append((time.perf_counter() - started) * 1000)
        assert answer.status == 200, (path, answer.status)
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 2),
        "p99_ms": round(times[max(0, int(len(times) * 0.99) - 1)], 2),
        "max_ms": round(times[-1], 2),
    }


def run(topic_count: int, group_count: int, requests: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="ferrymq-bench-console-") as directory:
        plan = cluster_up(directory, nodes=3, auto_ports=True, settings=SETTINGS)
        try:
            return measure(plan, topic_count, group_count, requests)
        finally:
            cluster_down(directory)


def measure(plan, topic_count: int, group_count: int, requests: int) -> dict:
    access = plan.nodes[0].grpc
    topics = [f"bench-{i:05d}" for i in range(topic_count)]
    groups = [f"bench-group-{i:04d}" for i in range(group_count)]
    create_topics_s = create_all(access, ROOT, [*topics, BUSY_TOPIC], group=False)
    create_groups_s = create_all(access, ROOT, groups, group=True)
    with Producer(access, security=ROOT) as producer:
        for i in range(4 * group_count // 10 + 100):
            producer.send(Message(BUSY_TOPIC, b"x" * 256, keys=[f"key-{i % 50}"]))
    give_groups_positions(access, groups)
    dead_letter_some(access)
    with Admin(access, security=ROOT) as admin:
        broker_group = admin.cluster_status().broker_groups[0]
        master = broker_group.master
    node = next(n for n in plan.nodes if n.id == master)
    slave = next(n for n in plan.nodes if n.id != master)
    client = ConsoleClient(console_of(plan, node))
    assert client.login(ROOT).status == 200
    calls = {
        "cluster": "/api/cluster",
        "topics_first_page": "/api/topics?limit=50",
        "topics_last_page": f"/api/topics?limit=50&offset={max(0, topic_count - 50)}",
        "topics_filtered": "/api/topics?filter=bench-0042&limit=50",
        "topic_detail": f"/api/topics/{topics[len(topics) // 2]}",
        "groups_first_page": "/api/groups?limit=50",
        "groups_filtered": "/api/groups?filter=group-09&limit=50",
        "group_detail": f"/api/groups/{groups[len(groups) // 2]}",
        "messages_by_key": f"/api/messages?topic={BUSY_TOPIC}&key=key-7",
        "messages_by_offset": f"/api/messages?topic={BUSY_TOPIC}&queue=0&offset=3",
        "busy_topic_detail": f"/api/topics/{BUSY_TOPIC}",  # its 1,000 consuming groups
        "message_history": (
            f"/api/messages/history?broker_group={broker_group.name}&topic={BUSY_TOPIC}"
            "&queue=0&offset=3"
        ),
        "dead_letters": f"/api/groups/{DEAD_GROUP}/dead-letters?limit=50",
        "producers": "/api/producers",
        "users": "/api/users",
        "node_config_here": f"/api/nodes/{node.id}/config",
        "node_config_of_a_slave": f"/api/nodes/{slave.id}/config",  # read at that node
    }
    results = {name: timed(client, path, requests) for name, path in calls.items()}
    client.close()
    worst = max(r["p99_ms"] for r in results.values())
    return {
        "topics": topic_count,
        "groups": group_count,
        "requests_each": requests,
        "create_topics_s": round(create_topics_s, 1),
        "create_groups_s": round(create_groups_s, 1),
        "calls": results,
        "worst_p99_ms": worst,
        "target_p99_ms": TARGET_P99_MS,
        "within_target": worst <= TARGET_P99_MS,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 topics and 100 groups")
    parser.add_argument("--smoke", action="store_true", help="50 topics, 10 groups (tests)")
    parser.add_argument("--requests", type=int, default=200, help="timed calls per API call")
    parser.add_argument("--json", action="store_true", help="only the JSON line")
    arguments = parser.parse_args()
    topics, groups = (1_000, 100) if arguments.quick else (10_000, 1_000)
    if arguments.smoke:
        topics, groups = 50, 10
    result = run(topics, groups, arguments.requests)
    if not arguments.json:
        for name, figures in result["calls"].items():
            print(f"{name:20s} p50 {figures['p50_ms']:8.2f} ms  p99 {figures['p99_ms']:8.2f} ms")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
