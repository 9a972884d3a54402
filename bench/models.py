"""RocketMQ 5.4/5.5's newest message models side by side: ``python -m bench.models [--peers
ferrymq,rocketmq] [--json]``.

Each scenario runs the same way against each peer, through the official RocketMQ Python
client (5.1.2, a process of its own: ``bench.models_client``), and reports what it
observed beside what RocketMQ's model promises; ``matches_expected`` is computed from the
observation, never assumed.

- priority (5.4): messages of priorities 0, 3, 1, 2, 3 to a PRIORITY topic of 4 queues,
  then one SimpleConsumer receive: the priorities in the order received. Promised: highest
  first (a PRIORITY topic's queue is the priority; POP reads its queues from the highest).
- recall (5.3.2): two messages to a DELAY topic due in 5 s; one is recalled by the handle
  of its send receipt; a SimpleConsumer receives until 10 s past the delivery time: the
  bodies that arrived. Promised: only the one not recalled.
- priority-4x and recall-4x: the same through the 4.x door, from the official remoting
  client in its 5.x line (``rocketmq-client`` 5.5.0, ``tests/compat/java/remoting5``'s
  driver, ``--java-remoting-driver``) given the peer's name servers: ``setPriority``
  sends (observed: each one's queue, then the priorities one SimpleConsumer receive
  takes), and two messages due in 5 s by ``setDeliverTimeMs`` of which one is recalled
  with ``recallMessage`` (observed: what a DefaultLitePullConsumer pulls until 10 s past
  the delivery time).
- lite (5.5, RIP-83): three messages to each of two lite topics of a LITE topic; a
  LitePushConsumer subscribes to the first: the bodies it consumed, per lite topic.
  Promised: the first's three in order, none of the second's.

Peers: ferrymq as a 3-node SYNC group; Apache RocketMQ 5.5.0 as ``bench.lite`` starts it
(one name server, one broker with ``enableLmq``/``enableMultiDispatch``, the proxy in
cluster mode), its broker also with ``recallMessageEnable`` (off by default: the broker
refuses every recall with NO_PERMISSION), its topics created with mqadmin's
``+message.type=...`` and the lite group bound to its topic (``+lite.bind.topic``). Apache
needs no switch for priority: a group's ``priority.factor`` defaults to 100 (every POP of a
PRIORITY topic reads by priority) and ``priorityOrderAsc`` (BrokerConfig, default true)
makes the highest queue id the highest priority. Messages are sent before a group's first
receive: its first POP starts at a queue's first message while that is still in memory
(``initPopOffsetByCheckMsgInMem``, default true), as a fresh broker's are.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from bench.lite import APACHE_VERSION, ApacheLite, FerrymqLite, client
from bench.peers.processes import ProcessRegistry
from bench.peers.workloads import log

PRIORITY_TOPIC = "ModelsPriority"
DELAY_TOPIC = "ModelsDelay"
LITE_TOPIC = "ModelsLite"
PRIORITY_4X_TOPIC = "ModelsPriority4x"
DELAY_4X_TOPIC = "ModelsDelay4x"
LITE_GROUP = "models-lite"
QUEUES = 4
PRIORITIES = [0, 3, 1, 2, 3]
DELAY_S = 5
LITE_TOPICS = ["chat-a", "chat-b"]
PER_LITE_TOPIC = 3
TOPICS = (
    (PRIORITY_TOPIC, QUEUES, "PRIORITY"),
    (DELAY_TOPIC, QUEUES, "DELAY"),
    (LITE_TOPIC, QUEUES, "LITE"),
    (PRIORITY_4X_TOPIC, QUEUES, "PRIORITY"),
    (DELAY_4X_TOPIC, QUEUES, "DELAY"),
)
GRACE_S = 10
REMOTING_DRIVER: list[str] = []  # the remoting driver's command line (--java-remoting-driver)
CLIENT_TIMEOUT_S = 300


class FerrymqModels(FerrymqLite):
    setup = "3 nodes, SYNC replication, ASYNC_FLUSH; topics of 4 queues"
    topics = TOPICS

    @property
    def namesrv(self) -> str:
        """Every node's remoting port: each is a name server to a 4.x client."""
        return ";".join(node.remoting for node in self.cluster.plan.nodes)


class ApacheModels(ApacheLite):
    setup = (
        f"Apache RocketMQ {APACHE_VERSION}: one broker (ASYNC_FLUSH, enableLmq, "
        "enableMultiDispatch, recallMessageEnable), proxy in cluster mode; topics of 4 queues"
    )
    topics = TOPICS
    lite_groups = ((LITE_GROUP, LITE_TOPIC),)
    # Consume queues in files, RocketMQ's default (bench.lite's RocksDB is for its 100,000
    # lite topics; these scenarios hold two).
    broker_settings = {"recallMessageEnable": "true"}


def row(sent: object, observed: object, expected: object, detail: object) -> dict:
    """One scenario's outcome: ``matches_expected`` is computed, never assumed."""
    return {
        "sent": sent,
        "observed": observed,
        "expected": expected,
        "matches_expected": observed == expected,
        "detail": detail,
    }


def ask(peer, request: dict) -> dict:
    return client(
        {"endpoints": peer.endpoints, **request},
        peer.home,
        timeout_s=CLIENT_TIMEOUT_S,
        module="bench.models_client",
    )


def priority(peer) -> dict:
    request = {"topic": PRIORITY_TOPIC, "group": "models-priority", "priorities": PRIORITIES}
    answer = ask(peer, {"op": "priority", **request})
    observed = [int(body.rpartition("-p")[2]) for body in answer["bodies"]]
    expected = sorted(PRIORITIES, reverse=True)
    return row(PRIORITIES, observed, expected, answer)


def recall(peer) -> dict:
    request = {"topic": DELAY_TOPIC, "group": "models-recall", "delay_s": DELAY_S}
    answer = ask(peer, {"op": "recall", **request})
    observed = [arrival["body"] for arrival in answer["arrivals"]]
    expected = ["kept"]
    return row(["recalled", "kept"], observed, expected, answer)


def remoting_client(peer, steps: list[dict]) -> Events:
    """The 4.x-protocol client's driver (``--java-remoting-driver``) run against ``peer``'s
    name servers: its events, one JSON object per line, the last ``done``."""
    if not REMOTING_DRIVER:
        raise RuntimeError(
            "needs --java-remoting-driver (make bench-models builds it: "
            "python -m tests.support.clients argv java-remoting5)"
        )
    home = Path(peer.home) / "remoting5"
    home.mkdir(parents=True, exist_ok=True)
    argv = [REMOTING_DRIVER[0], f"-Duser.home={home}", *REMOTING_DRIVER[1:]]
    done = subprocess.run(
        argv,
        input=json.dumps({"namesrv": peer.namesrv, "steps": steps}),
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        env={**os.environ, "HOME": str(home)},
        cwd=home,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not events or events[-1].get("event") != "done":
        raise RuntimeError(f"the driver did not finish: {done.stderr[-500:]}")
    return Events(events)


class Events(list):
    def of(self, kind: str) -> list[dict]:
        return [event for event in self if event.get("event") == kind]


def priority_4x(peer) -> dict:
    messages = [
        {"topic": PRIORITY_4X_TOPIC, "body": f"m{index}-p{value}", "priority": value}
        for index, value in enumerate(PRIORITIES)
    ]
    run = remoting_client(peer, [{"do": "produce", "group": "models-4x", "messages": messages}])
    sent = {event["body"]: event for event in run.of("sent")}
    request = {"topic": PRIORITY_4X_TOPIC, "group": "models-priority-4x", "priorities": []}
    answer = ask(peer, {"op": "priority", **request})
    observed = {
        "queues": [sent.get(m["body"], {}).get("queue") for m in messages],
        "received": [int(body.rpartition("-p")[2]) for body in answer["bodies"]],
    }
    expected = {
        "queues": [min(value, QUEUES - 1) for value in PRIORITIES],
        "received": sorted(PRIORITIES, reverse=True),
    }
    return row(PRIORITIES, observed, expected, {"send_failed": run.of("send_failed"), **answer})


def recall_4x(peer) -> dict:
    delayed = [
        {"topic": DELAY_4X_TOPIC, "body": body, "deliver_in_ms": DELAY_S * 1000}
        for body in ("recalled", "kept")
    ]
    steps = [
        {"do": "produce", "group": "models-4x", "messages": delayed},
        {"do": "recall", "group": "models-4x", "topic": DELAY_4X_TOPIC, "body": "recalled"},
        {
            "do": "pull",
            "group": "models-recall-4x",
            "topic": DELAY_4X_TOPIC,
            "expect": ["kept"],
            "deadline_s": DELAY_S + GRACE_S,
            "linger_s": 3,
        },
    ]
    run = remoting_client(peer, steps)
    observed = [event["body"] for event in run.of("pulled")]
    expected = ["kept"]
    return row(
        ["recalled", "kept"],
        observed,
        expected,
        {
            "recall_handles": {e["body"]: bool(e.get("recall_handle")) for e in run.of("sent")},
            "recalled": run.of("recalled"),
            "recall_failed": run.of("recall_failed"),
        },
    )


def lite(peer) -> dict:
    request = {
        "topic": LITE_TOPIC,
        "group": LITE_GROUP,
        "lite_topics": LITE_TOPICS,
        "per_lite_topic": PER_LITE_TOPIC,
    }
    answer = ask(peer, {"op": "lite", **request})
    observed = {
        name: [body for body in answer["bodies"] if body.startswith(f"{name}/")]
        for name in LITE_TOPICS
    }
    expected = {name: [] for name in LITE_TOPICS}
    expected[LITE_TOPICS[0]] = [f"{LITE_TOPICS[0]}/{n}" for n in range(PER_LITE_TOPIC)]
    sent = {name: PER_LITE_TOPIC for name in LITE_TOPICS}
    return {**row(sent, observed, expected, answer), "subscribed": LITE_TOPICS[0]}


SCENARIOS: dict[str, Callable[[object], dict]] = {
    "priority": priority,
    "recall": recall,
    "priority-4x": priority_4x,
    "recall-4x": recall_4x,
    "lite": lite,
}
PEERS = {"ferrymq": FerrymqModels, "rocketmq": ApacheModels}


def run_scenario(peer, name: str) -> dict:
    """One scenario's row; a client that failed is reported as such, and the next runs."""
    named = {"peer": peer.name, "setup": peer.setup, "scenario": name}
    try:
        return {**named, **SCENARIOS[name](peer)}
    except Exception as error:
        return {**named, "matches_expected": False, "error": f"{error}"[-500:]}


def run_peer(name: str, scenarios: list[str]) -> list[dict]:
    """Every scenario against one peer, started for them and stopped after them."""
    registry = ProcessRegistry("models")
    peer = PEERS[name]()
    try:
        log(f"{name}: starting")
        try:
            peer.start(registry)
        except Exception as error:  # Java, Maven or a jar missing: said once per scenario
            failed = {"matches_expected": False, "error": f"not started: {error}"[-500:]}
            return [{"peer": name, "setup": peer.setup, "scenario": s, **failed} for s in scenarios]
        rows = []
        for scenario in scenarios:
            rows.append(run_scenario(peer, scenario))
            log(f"{name} {scenario}: {rows[-1]}")
        return rows
    finally:
        peer.stop()
        registry.stop_all()


def table(rows: list[dict]) -> str:
    lines = ["| scenario | peer | observed | matches expected |", "|---|---|---|---|"]
    for row in rows:
        # A failed client's error ends its stderr: its last line says what went wrong.
        last = (row.get("error", "").strip().splitlines() or [""])[-1]
        observed = row.get("observed", f"error: {last[:160]}")
        lines.append(
            f"| {row['scenario']} | {row['peer']} | {json.dumps(observed)} | "
            f"{row['matches_expected']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.models", description=__doc__)
    parser.add_argument("--peers", default="ferrymq,rocketmq")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--java-remoting-driver",
        default="",
        help="JSON list: the command line of tests/compat/java/remoting5's driver, for the "
        "-4x scenarios (python -m tests.support.clients argv java-remoting5 prints it)",
    )
    args = parser.parse_args(argv)
    REMOTING_DRIVER[:] = json.loads(args.java_remoting_driver or "[]")
    scenarios = args.scenarios.split(",")
    rows = [row for name in args.peers.split(",") for row in run_peer(name, scenarios)]
    print(json.dumps(rows) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
