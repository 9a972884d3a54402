"""Validate the 4.x remoting drivers against Apache RocketMQ itself:
``python -m tests.support.validate_against_apache [--only NAME ...] [--keep DIR]``.

Not part of ``make test``. ferrymq does not serve the remoting protocol yet; these drivers
(``tests/compat/java/remoting4``, ``tests/compat/java/mqadmin``, ``tests/compat/go/remoting``,
``tests/compat/alions``) will test it when it does. This proves them first: it starts
Apache RocketMQ 5.3.3 (a name server and one master broker, the jars fetched from Maven
Central into ``.cache/clients/`` like the drivers), runs every driver scenario against it
and prints a pass/fail table; exit status 0 only when every row passes.

What the drivers need from the broker (``BROKER_SETTINGS``):

* ``enablePropertyFilter=true``: SQL92 subscriptions (Java, Go, ali-ons) are refused
  without it.
* topics created first (``updateTopic``; ``autoCreateTopicEnable=false`` here, so nothing
  relies on the broker creating them on first send); consumer groups, the retry topics
  and the dead-letter topics are created by the broker on first use
  (``autoCreateSubscriptionGroup=true``, the default).
* ``messageDelayLevel`` with short levels (level 2 = 2 s, the rest 1 s) and a shorter
  transaction check (``transactionCheckInterval`` 2 s, ``transactionTimeOut`` 5 s): the
  defaults (retries from 10 s, checks every 30 s) only make a run slower.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.peers import jvm, rocketmq_apache, rocketmq_one
from bench.peers.processes import ProcessRegistry
from tests.support import clients

VERSION = rocketmq_apache.VERSION
ARTIFACTS = tuple(
    jvm.Artifact("org.apache.rocketmq", name, VERSION)
    for name in ("rocketmq-namesrv", "rocketmq-broker")
)
CLUSTER = rocketmq_one.CLUSTER
BROKER = rocketmq_one.BROKER
QUEUES = 4
DELAY_LEVELS = " ".join(["1s", "2s"] + ["1s"] * 16)  # 18 levels, as the default has

BROKER_SETTINGS = {
    "autoCreateTopicEnable": "false",
    "autoCreateSubscriptionGroup": "true",
    "enablePropertyFilter": "true",
    "messageDelayLevel": DELAY_LEVELS,
    "transactionCheckInterval": "2000",
    # Not under 3 s: the broker writes the end of a transaction (its op message) in batches
    # every transactionOpBatchInterval (3 s), and a half without one is checked.
    "transactionTimeOut": "5000",
}


class ApacheRocketMQ:
    """A name server and one master broker of Apache RocketMQ in the registry's processes
    (``bench.peers.rocketmq_one``, with ``BROKER_SETTINGS``)."""

    def __init__(self, registry: ProcessRegistry, root: Path) -> None:
        self.registry = registry
        self.root = root
        self.namesrv = ""
        self.broker = ""

    def start(self) -> None:
        lib = clients.maven_libs("apache-rocketmq", ARTIFACTS) / "jars"
        started = rocketmq_one.start_one_broker(
            self.registry, jvm.find_java(), str(lib), str(self.root), BROKER_SETTINGS
        )
        self.namesrv, self.broker = started.namesrv, started.broker


# ---- the scenarios -------------------------------------------------------------------
@dataclass
class Row:
    driver: str
    what: str
    ok: bool
    detail: str = ""


class Checks:
    """Collects the rows of one driver run: ``check(what, condition, detail)``. The run's
    events and stderr are kept beside its home (``events.jsonl``, ``stderr.txt``)."""

    def __init__(self, driver: str, run: clients.Run, home: Path) -> None:
        self.driver = driver
        self.run = run
        self.rows: list[Row] = []
        with open(home / "events.jsonl", "a", encoding="utf-8") as f:
            f.writelines(json.dumps(e) + "\n" for e in run.events)
        with open(home / "stderr.txt", "a", encoding="utf-8") as f:
            f.write(run.stderr)

    def check(self, what: str, condition: Callable[[], bool], detail: Callable[[], str]) -> None:
        try:
            ok = bool(condition())
            note = "" if ok else detail()
        except Exception as error:  # a missing event is a failed row, not a crash
            ok, note = False, f"{type(error).__name__}: {error}"
        self.rows.append(Row(self.driver, what, ok, note))

    def ran_every_step(self) -> None:
        """The driver reached ``done`` with no failed step and no failed send."""
        run = self.run
        self.check(
            "driver ran every step",
            lambda: run.of("done") and not run.of("step_failed"),
            run.explain,
        )
        self.check(
            "no send failed", lambda: not run.of("send_failed"), lambda: f"{run.of('send_failed')}"
        )

    def broadcast(self, consumed: list[dict], topic: str) -> None:
        """Each of two broadcasting instances consumed all of b-0, b-1, b-2."""
        bcast = [e for e in consumed if e["topic"] == topic]
        instances = {e["instance"] for e in bcast}
        self.check(
            "push broadcasting: each of 2 instances gets every message",
            lambda: (
                len(instances) == 2
                and all(
                    sorted(e["body"] for e in bcast if e["instance"] == name)
                    == ["b-0", "b-1", "b-2"]
                    for name in instances
                )
            ),
            lambda: f"{[(e['instance'], e['body']) for e in bcast]}",
        )

    def sql92(self, consumed: list[dict], topic: str) -> None:
        """The ``n BETWEEN 1 AND 2`` subscription got s-1 and s-2 only."""
        sql = sorted(e["body"] for e in consumed if e["topic"] == topic)
        self.check(
            "push SQL92 filter (n BETWEEN 1 AND 2)", lambda: sql == ["s-1", "s-2"], lambda: f"{sql}"
        )


run_driver_names = {"j4": "java 4.x remoting", "g2": "go remoting (client-go/v2)", "ons": "ali-ons"}


def sample_of(run: clients.Run, topic: str, group: str, id_field: str) -> dict:
    """The "r-ok" message every driver sends to its retry topic, for mqadmin to look up."""
    sent = clients.first_of(run.of("sent")).get("r-ok", {})
    return {
        "driver": run_driver_names.get(group.split("-")[0], group),
        "topic": topic,
        "group": group,
        "key": "r-ok",
        "body": "r-ok",
        "offset_id": sent.get(id_field) or "none",
    }


def bodies(events: list[dict]) -> list[str]:
    return [e["body"] for e in events]


def user_properties(e: dict, names: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in e["properties"].items() if k in names}


def topic_names(prefix: str) -> dict[str, str]:
    return {
        kind: f"{prefix}-{kind}"
        for kind in ("kinds", "orderly", "delay", "tx", "retry", "oretry", "bcast", "sql", "lite")
    }


def producing_messages(topics: dict[str, str], oneway: bool = True) -> list[dict]:
    """Every way of sending that the remoting drivers share: sync, async, oneway (Java,
    Go), by a key (orderly), with a delay level, with tags, keys and user properties."""
    kinds = topics["kinds"]
    messages = [
        {
            "topic": kinds,
            "body": f"{mode}-{i}",
            "tags": f"Tag{i}",
            "keys": [f"k-{mode}-{i}", "shared"],
            "properties": {"color": f"c{i}", "unicode": "ü-✓"},
            "mode": mode,
        }
        for mode in ("sync", "async", *(("oneway",) if oneway else ()))
        for i in range(2)
    ]
    messages += [
        {"topic": topics["orderly"], "body": f"{key}-{i}", "order_key": key}
        for i in range(4)
        for key in ("order-a", "order-b")
    ]
    messages += [{"topic": topics["delay"], "body": "delayed", "delay_level": 2}]
    return messages


def check_kinds(c: Checks, messages: list[dict], topics: dict[str, str], consumed: list[dict]):
    """Rows for what every producer sent and its push consumer got back."""
    sent = clients.first_of(c.run.of("sent"))
    kinds = [m for m in messages if m["topic"] == topics["kinds"]]
    got = clients.first_of(e for e in consumed if e["topic"] == topics["kinds"])
    for mode in sorted({m.get("mode", "sync") for m in kinds}):
        mine = [m for m in kinds if m.get("mode", "sync") == mode]
        c.check(
            f"send {mode}, consumed intact (id, tags, keys, properties)",
            lambda mine=mine: all(
                sent[m["body"]]["id"] == got[m["body"]]["id"]
                and got[m["body"]]["tags"] == m["tags"]
                and sorted(got[m["body"]]["keys"]) == sorted(m["keys"])
                and user_properties(got[m["body"]], m["properties"]) == m["properties"]
                for m in mine
            ),
            lambda mine=mine: (
                f"sent {[sent.get(m['body']) for m in mine]} got "
                f"{[got.get(m['body']) for m in mine]}"
            ),
        )
    orderly = [e for e in consumed if e["topic"] == topics["orderly"]]

    def in_order() -> bool:
        for key in ("order-a", "order-b"):
            seen = [e["body"] for e in orderly if e["body"].startswith(key)]
            if seen != [f"{key}-{i}" for i in range(4)]:
                return False
            if len({sent[f"{key}-{i}"]["queue"] for i in range(4)}) != 1:
                return False
        return True

    c.check(
        "send orderly (queue by key), consumed in order",
        in_order,
        lambda: f"consumed {bodies(orderly)}",
    )
    delayed = [e for e in consumed if e["body"] == "delayed"]
    c.check(
        "send with delay level 2 (2 s), not consumed before",
        lambda: (
            len(delayed) == 1 and delayed[0]["received_at"] - delayed[0]["born_timestamp"] >= 1900
        ),
        lambda: f"{delayed}",
    )


def java_remoting(apache: ApacheRocketMQ, home: Path) -> tuple[list[Row], dict]:
    built = clients.driver("java-remoting")
    t = topic_names("j4")
    messages = producing_messages(t)
    batch = [{"topic": t["kinds"], "body": f"batch-{i}", "keys": [f"kb-{i}"]} for i in range(3)]
    transactions = [
        {"body": "tx-commit", "local": "COMMIT_MESSAGE"},
        {"body": "tx-rollback", "local": "ROLLBACK_MESSAGE"},
        {"body": "tx-orphan", "local": "UNKNOW"},
    ]
    kinds_expect = [m["body"] for m in messages if m["topic"] == t["kinds"]] + bodies(batch)
    steps = [
        {"do": "produce", "group": "j4-producer", "messages": messages},
        {"do": "produce", "group": "j4-producer", "batch": True, "messages": batch},
        {
            "do": "transaction",
            "group": "j4-tx-producer",
            "topic": t["tx"],
            "messages": transactions,
            "check_answer": "COMMIT_MESSAGE",
            "checks": 1,
            "wait_for_check_s": 30,
        },
        {
            "do": "produce",
            "group": "j4-producer",
            "messages": [
                {"topic": t["retry"], "body": b, "keys": [b]} for b in ("r-ok", "r-poison")
            ]
            + [
                {"topic": t["oretry"], "body": f"o-{i}", "order_key": "one", "keys": [f"o-{i}"]}
                for i in range(3)
            ]
            + [{"topic": t["bcast"], "body": f"b-{i}"} for i in range(3)]
            + [{"topic": t["sql"], "body": f"s-{i}", "properties": {"n": str(i)}} for i in range(4)]
            + [{"topic": t["lite"], "body": f"l-{i}"} for i in range(5)],
        },
        {
            "do": "push",
            "group": "j4-kinds",
            "topic": t["kinds"],
            "expect": kinds_expect,
            "deadline_s": 60,
        },
        {
            "do": "push",
            "group": "j4-orderly",
            "topic": t["orderly"],
            "orderly": True,
            "expect": [m["body"] for m in messages if m["topic"] == t["orderly"]],
            "deadline_s": 60,
        },
        {"do": "push", "group": "j4-delay", "topic": t["delay"], "expect": ["delayed"]},
        {
            "do": "push",
            "group": "j4-tx-reader",
            "topic": t["tx"],
            "expect": ["tx-commit", "tx-orphan"],
            "linger_s": 3,
        },
        {
            "do": "push",
            "group": "j4-retry",
            "topic": t["retry"],
            "max_reconsume": 2,
            "fail": ["r-poison"],
            "fail_attempts": 3,
            "expect": ["r-ok"],
            "deadline_s": 60,
            "linger_s": 2,
        },
        {
            "do": "push",
            "group": "j4-oretry",
            "topic": t["oretry"],
            "orderly": True,
            "max_reconsume": 2,
            "fail": ["o-1"],
            "fail_attempts": 3,
            "expect": ["o-0", "o-2"],
            "deadline_s": 60,
            "linger_s": 2,
        },
        {
            "do": "push",
            "group": "j4-bcast",
            "topic": t["bcast"],
            "broadcast": True,
            "instances": 2,
            "expect": [f"b-{i}" for i in range(3)],
        },
        {
            "do": "push",
            "group": "j4-sql",
            "topic": t["sql"],
            "sql": True,
            "expression": "n BETWEEN 1 AND 2",
            "expect": ["s-1", "s-2"],
            "linger_s": 3,
        },
        {
            "do": "lite_pull",
            "group": "j4-lite",
            "topic": t["lite"],
            "expect": [f"l-{i}" for i in range(5)],
        },
        {"do": "query_key", "topic": "%DLQ%j4-retry", "key": "r-poison", "count": 1},
        {"do": "query_key", "topic": "%DLQ%j4-oretry", "key": "o-1", "count": 1},
        {"do": "query_key", "topic": t["kinds"], "key": "shared", "count": 6},
    ]
    run = clients.run(
        built, {"namesrv": apache.namesrv, "steps": steps}, home, 600, check_done=False
    )
    c = Checks("java 4.x remoting", run, home)
    c.ran_every_step()
    consumed = run.of("consumed")
    check_kinds(c, messages, t, consumed)
    sent = clients.first_of(run.of("sent"))
    got = clients.first_of(consumed)
    c.check(
        "send batch (3 messages), each consumed with its own id",
        lambda: (
            all(sent[f"batch-{i}"]["id"] == got[f"batch-{i}"]["id"] for i in range(3))
            and len({sent[f"batch-{i}"]["id"] for i in range(3)}) == 3
        ),
        lambda: f"{[sent.get(f'batch-{i}') for i in range(3)]}",
    )
    tx_seen = sorted(e["body"] for e in consumed if e["topic"] == t["tx"])
    c.check(
        "transaction: commit, rollback, unknown then checked and committed",
        lambda: (
            tx_seen == ["tx-commit", "tx-orphan"] and bodies(run.of("checked")) == ["tx-orphan"]
        ),
        lambda: f"consumed {tx_seen}, checked {run.of('checked')}",
    )
    retry = [e for e in consumed if e["body"] == "r-poison"]
    c.check(
        "push concurrently: RECONSUME_LATER retried (reconsume 0, 1, 2) then DLQ",
        lambda: (
            [e["reconsume_times"] for e in retry] == [0, 1, 2]
            and [e["body"] for e in run.of("queried") if e["topic"] == "%DLQ%j4-retry"]
            == ["r-poison"]
        ),
        lambda: f"attempts {[e['reconsume_times'] for e in retry]}, queried {run.of('queried')}",
    )
    oretry = [e for e in consumed if e["topic"] == t["oretry"]]
    c.check(
        "push orderly: SUSPEND retried locally, then DLQ, order kept",
        lambda: (
            [e["body"] for e in oretry if not e["failed"]] == ["o-0", "o-2"]
            and len([e for e in oretry if e["failed"]]) == 3
            and [e["body"] for e in run.of("queried") if e["topic"] == "%DLQ%j4-oretry"] == ["o-1"]
        ),
        lambda: f"consumed {[(e['body'], e['failed']) for e in oretry]}",
    )
    c.broadcast(consumed, t["bcast"])
    c.sql92(consumed, t["sql"])
    c.check(
        "DefaultLitePullConsumer polls every message",
        lambda: sorted(bodies(run.of("pulled"))) == [f"l-{i}" for i in range(5)],
        lambda: f"{bodies(run.of('pulled'))}",
    )
    by_key = [e for e in run.of("queried") if e["topic"] == t["kinds"]]
    c.check(
        "queryMessage by key",
        lambda: len({e["body"] for e in by_key}) == 6,
        lambda: f"{bodies(by_key)}",
    )
    return c.rows, sample_of(run, t["retry"], "j4-retry", "offset_id")


def mqadmin(apache: ApacheRocketMQ, home: Path, topics: list[str]) -> list[Row]:
    """The topics every driver needs, made first with ``updateTopic -b`` (one JVM); a
    command that failed (a timeout on 2 loaded cores) is tried once more."""
    built = clients.driver("mqadmin")

    def create(names: list[str]) -> clients.Run:
        commands = [
            ["updateTopic", "-b", apache.broker, "-t", t, "-r", str(QUEUES), "-w", str(QUEUES)]
            for t in names
        ]
        spec = {"namesrv": apache.namesrv, "commands": commands}
        return clients.run(built, spec, home, 600, check_done=False)

    def made(e: dict) -> bool:
        return "create topic to" in e["output"] and "success" in e["output"]

    run = create(topics)
    again = [e["argv"][4] for e in run.of("command") if not made(e)]
    if again:
        run.events = [e for e in run.events if e.get("event") != "command" or made(e)]
        run.events += create(again).of("command")
    c = Checks("mqadmin", run, home)
    c.check(
        f"updateTopic ({len(topics)} topics, -b broker)",
        lambda: sorted(e["argv"][4] for e in run.of("command") if made(e)) == sorted(topics),
        lambda: f"{[e['output'][:600] for e in run.of('command') if not made(e)]}",
    )
    return c.rows


def mqadmin_after(apache: ApacheRocketMQ, home: Path, samples: list[dict]) -> list[Row]:
    """The other commands, once the drivers have sent and consumed: each sample names one
    message of a driver (topic, key, the consumer group that read it, its offset message
    id); the first is looked up every way, and each driver's poison message is looked for
    in its retry group's dead-letter topic."""
    built = clients.driver("mqadmin")
    sample = samples[0]
    topic, group, key = sample["topic"], sample["group"], sample["key"]
    commands = [
        ["updateTopic", "-c", CLUSTER, "-t", "mqadmin-made", "-r", "2", "-w", "2"],
        ["topicList"],
        ["topicRoute", "-t", topic],
        ["clusterList"],
        ["consumerProgress", "-g", group],
        ["queryMsgByKey", "-t", topic, "-k", key],
        ["queryMsgById", "-t", topic, "-i", sample["offset_id"]],
    ] + [["queryMsgByKey", "-t", f"%DLQ%{s['group']}", "-k", "r-poison"] for s in samples]
    run = clients.run(
        built, {"namesrv": apache.namesrv, "commands": commands}, home, 600, check_done=False
    )
    out = {e["argv"][0]: e for e in run.of("command") if not e["argv"][2].startswith("%DLQ%")}
    c = Checks("mqadmin", run, home)
    c.check(
        "updateTopic -c cluster",
        lambda: "success" in out["updateTopic"]["output"],
        lambda: out["updateTopic"]["output"][-500:],
    )
    c.check(
        "topicList",
        lambda: (
            topic in out["topicList"]["output"] and "mqadmin-made" in out["topicList"]["output"]
        ),
        lambda: out["topicList"]["output"][-500:],
    )
    c.check(
        "topicRoute",
        lambda: (
            BROKER in out["topicRoute"]["output"]
            and '"readQueueNums":4' in out["topicRoute"]["output"].replace(" ", "")
        ),
        lambda: out["topicRoute"]["output"][-500:],
    )
    c.check(
        "clusterList",
        lambda: CLUSTER in out["clusterList"]["output"] and BROKER in out["clusterList"]["output"],
        lambda: out["clusterList"]["output"][-500:],
    )
    c.check(
        "consumerProgress",
        lambda: topic in out["consumerProgress"]["output"] and not out["consumerProgress"]["error"],
        lambda: out["consumerProgress"]["output"][-800:],
    )
    by_key = out["queryMsgByKey"]["output"]
    ids = [
        line.split()[0]
        for line in by_key.splitlines()
        if line.strip() and re.fullmatch(r"[0-9A-Fa-f]{32,}", line.split()[0])
    ]
    c.check("queryMsgByKey", lambda: len(ids) >= 1, lambda: by_key[-500:])
    by_id = out["queryMsgById"]["output"]
    c.check(
        "queryMsgById (an offset message id)",
        lambda: topic in by_id and key in by_id and sample["offset_id"] in by_id,
        lambda: by_id[-800:],
    )
    dead = {
        e["argv"][2]: e["output"] for e in run.of("command") if e["argv"][2].startswith("%DLQ%")
    }
    for s in samples:
        found = dead.get(f"%DLQ%{s['group']}", "")
        c.rows += [
            Row(
                s["driver"],
                f"dead-lettered message in %DLQ%{s['group']} (queryMsgByKey)",
                any(
                    re.fullmatch(r"[0-9A-Fa-f]{32,}", line.split()[0])
                    for line in found.splitlines()[1:]
                    if line.strip()
                ),
                found[-500:],
            )
        ]
    return c.rows


def go_remoting(apache: ApacheRocketMQ, home: Path) -> tuple[list[Row], dict]:
    built = clients.driver("go-remoting")
    t = topic_names("g2")
    messages = producing_messages(t)
    batch = [{"topic": t["kinds"], "body": f"batch-{i}", "keys": [f"kb-{i}"]} for i in range(3)]
    transactions = [
        {"body": "tx-commit", "local": "COMMIT"},
        {"body": "tx-rollback", "local": "ROLLBACK"},
        {"body": "tx-orphan", "local": "UNKNOWN"},
    ]
    steps = [
        {"do": "produce", "group": "g2-producer", "messages": messages},
        {"do": "produce", "group": "g2-producer", "batch": True, "messages": batch},
        {
            "do": "transaction",
            "group": "g2-tx-producer",
            "topic": t["tx"],
            "messages": transactions,
            "check_answer": "COMMIT",
            "checks": 1,
            "wait_for_check_s": 30,
        },
        {
            "do": "produce",
            "group": "g2-producer",
            "messages": [
                {"topic": t["retry"], "body": b, "keys": [b]} for b in ("r-ok", "r-poison")
            ]
            + [{"topic": t["bcast"], "body": f"b-{i}"} for i in range(3)]
            + [
                {"topic": t["sql"], "body": f"s-{i}", "properties": {"n": str(i)}} for i in range(4)
            ],
        },
        {
            "do": "push",
            "group": "g2-kinds",
            "topic": t["kinds"],
            "expect": [m["body"] for m in messages if m["topic"] == t["kinds"]] + bodies(batch),
            "deadline_s": 60,
        },
        {
            "do": "push",
            "group": "g2-orderly",
            "topic": t["orderly"],
            "orderly": True,
            "expect": [m["body"] for m in messages if m["topic"] == t["orderly"]],
            "deadline_s": 60,
        },
        {"do": "push", "group": "g2-delay", "topic": t["delay"], "expect": ["delayed"]},
        {
            "do": "push",
            "group": "g2-tx-reader",
            "topic": t["tx"],
            "expect": ["tx-commit", "tx-orphan"],
            "linger_s": 3,
        },
        {
            "do": "push",
            "group": "g2-retry",
            "topic": t["retry"],
            "max_reconsume": 2,
            "fail": ["r-poison"],
            "fail_attempts": 3,
            "expect": ["r-ok"],
            "deadline_s": 60,
            "linger_s": 2,
        },
        {
            "do": "push",
            "group": "g2-bcast",
            "topic": t["bcast"],
            "broadcast": True,
            "instances": 2,
            "expect": [f"b-{i}" for i in range(3)],
        },
        {
            "do": "push",
            "group": "g2-sql",
            "topic": t["sql"],
            "sql": True,
            "expression": "n BETWEEN 1 AND 2",
            "expect": ["s-1", "s-2"],
            "linger_s": 3,
        },
    ]
    run = clients.run(
        built, {"namesrv": apache.namesrv, "steps": steps}, home, 600, check_done=False
    )
    c = Checks("go remoting (client-go/v2)", run, home)
    c.ran_every_step()
    consumed = run.of("consumed")
    check_kinds(c, messages, t, consumed)
    sent = clients.first_of(run.of("sent"))
    got = clients.first_of(consumed)
    c.check(
        "send batch (3 messages; no UNIQ_KEY: ids are offset ids), each consumed",
        lambda: (
            all(sent[f"batch-{i}"]["offset_id"] == got[f"batch-{i}"]["offset_id"] for i in range(3))
            and all("UNIQ_KEY" not in got[f"batch-{i}"]["properties"] for i in range(3))
        ),
        lambda: (
            f"{[sent.get(f'batch-{i}') for i in range(3)]} "
            f"{[got.get(f'batch-{i}') for i in range(3)]}"
        ),
    )
    tx_seen = sorted(e["body"] for e in consumed if e["topic"] == t["tx"])
    c.check(
        "transaction: commit, rollback, unknown then checked and committed",
        lambda: (
            tx_seen == ["tx-commit", "tx-orphan"] and bodies(run.of("checked")) == ["tx-orphan"]
        ),
        lambda: f"consumed {tx_seen}, checked {run.of('checked')}",
    )
    retry = [e for e in consumed if e["body"] == "r-poison"]
    c.check(
        "push: ConsumeRetryLater retried (reconsume 0, 1, 2), then no more (DLQ)",
        lambda: [e["reconsume_times"] for e in retry] == [0, 1, 2],
        lambda: f"attempts {[e['reconsume_times'] for e in retry]}",
    )
    c.broadcast(consumed, t["bcast"])
    c.sql92(consumed, t["sql"])
    return c.rows, sample_of(run, t["retry"], "g2-retry", "offset_id")


def alions(apache: ApacheRocketMQ, home: Path) -> tuple[list[Row], dict]:
    built = clients.driver("alions")
    t = topic_names("ons")
    kinds = [
        {
            "topic": t["kinds"],
            "body": f"m-{i}",
            "tags": f"Tag{i}",
            "keys": [f"k-{i}", "shared"],
            "properties": {"color": f"c{i}"},
        }
        for i in range(3)
    ]
    steps = [
        {
            "do": "produce",
            "group": "ons-producer",
            "messages": kinds
            + [{"topic": t["delay"], "body": "delayed", "delay_level": 2}]
            + [{"topic": t["retry"], "body": b, "keys": [b]} for b in ("r-ok", "r-poison")]
            + [{"topic": t["bcast"], "body": f"b-{i}"} for i in range(3)]
            + [
                {"topic": t["sql"], "body": f"s-{i}", "properties": {"n": str(i)}} for i in range(4)
            ],
        },
        {
            "do": "push",
            "group": "ons-kinds",
            "topic": t["kinds"],
            "expect": bodies(kinds),
            "deadline_s": 60,
        },
        {"do": "push", "group": "ons-delay", "topic": t["delay"], "expect": ["delayed"]},
        {
            "do": "push",
            "group": "ons-retry",
            "topic": t["retry"],
            "max_reconsume": 2,
            "fail": ["r-poison"],
            "fail_attempts": 3,
            "expect": ["r-ok"],
            "deadline_s": 60,
            "linger_s": 2,
        },
        {
            "do": "push",
            "group": "ons-bcast",
            "topic": t["bcast"],
            "broadcast": True,
            "instances": 2,
            "expect": [f"b-{i}" for i in range(3)],
        },
        {
            "do": "push",
            "group": "ons-sql",
            "topic": t["sql"],
            "sql": True,
            "expression": "n BETWEEN 1 AND 2",
            "expect": ["s-1", "s-2"],
            "linger_s": 3,
        },
    ]
    run = clients.run(
        built, {"namesrv": apache.namesrv, "steps": steps}, home, 600, check_done=False
    )
    c = Checks("ali-ons", run, home)
    c.ran_every_step()
    consumed = run.of("consumed")
    sent = clients.first_of(run.of("sent"))
    got = clients.first_of(consumed)
    c.check(
        "send, consumed intact (tags, keys, properties)",
        lambda: all(
            got[m["body"]]["tags"] == m["tags"]
            and sorted(got[m["body"]]["keys"]) == sorted(m["keys"])
            and got[m["body"]]["properties"].get("color") == m["properties"]["color"]
            for m in kinds
        ),
        lambda: f"{[got.get(m['body']) for m in kinds]}",
    )
    # ali-ons reports the broker's offset message id as the id (not UNIQ_KEY).
    c.check(
        "send result id = the consumed message's offset id",
        lambda: all(sent[m["body"]]["id"] == got[m["body"]]["id"] for m in kinds),
        lambda: f"{[(sent.get(m['body']), got.get(m['body'], {}).get('id')) for m in kinds]}",
    )
    delayed = [e for e in consumed if e["body"] == "delayed"]
    c.check(
        "send with delay level 2 (2 s), not consumed before",
        lambda: (
            len(delayed) == 1 and delayed[0]["received_at"] - delayed[0]["born_timestamp"] >= 1900
        ),
        lambda: f"{delayed}",
    )
    retry = [e for e in consumed if e["body"] == "r-poison"]
    c.check(
        "push: a throwing handler retried (reconsume 0, 1, 2), then no more (DLQ)",
        lambda: [e["reconsume_times"] for e in retry] == [0, 1, 2],
        lambda: f"attempts {[e['reconsume_times'] for e in retry]}",
    )
    c.broadcast(consumed, t["bcast"])
    c.sql92(consumed, t["sql"])
    return c.rows, sample_of(run, t["retry"], "ons-retry", "id")


DRIVERS = {"java": java_remoting, "go": go_remoting, "alions": alions}
DRIVER_NAMES = {"java": "java-remoting", "go": "go-remoting", "alions": "alions"}


def guarded(driver: str, scenario: Callable[[], list[Row]]) -> list[Row]:
    """The scenario's rows, or one failed row saying how it broke."""
    try:
        return scenario()
    except Exception as error:
        return [Row(driver, "scenario ran to its end", False, f"{type(error).__name__}: {error}")]


def table(rows: list[Row]) -> str:
    width = max(len(r.driver) for r in rows)
    what = max(len(r.what) for r in rows)
    lines = [f"{'driver':<{width}}  {'scenario':<{what}}  result", "-" * (width + what + 10)]
    for r in rows:
        lines.append(f"{r.driver:<{width}}  {r.what:<{what}}  {'pass' if r.ok else 'FAIL'}")
    failed = [r for r in rows if not r.ok]
    lines.append(f"{len(rows) - len(failed)} passed, {len(failed)} failed")
    for r in failed:
        lines.append(f"\nFAIL {r.driver}: {r.what}\n{r.detail[-3000:]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", choices=sorted(DRIVERS), help="drivers to run")
    parser.add_argument("--keep", help="a directory to keep logs and data in (default: removed)")
    args = parser.parse_args(argv)
    chosen = args.only or list(DRIVERS)
    root = Path(args.keep or tempfile.mkdtemp(prefix="ferrymq-validate-apache-"))
    root.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    started = time.monotonic()
    with ProcessRegistry("validate-against-apache") as registry:
        if not args.keep:
            registry.directories.append(str(root))
        try:
            for name in ("mqadmin", *(DRIVER_NAMES[n] for n in chosen)):
                clients.driver(name)  # every build before the broker starts
        except clients.ClientUnavailable as error:
            print(clients.unavailable(error), file=sys.stderr)
            return 2
        apache = ApacheRocketMQ(registry, root / "apache")
        apache.start()
        print(
            f"Apache RocketMQ {VERSION}: namesrv {apache.namesrv}, broker {apache.broker}",
            flush=True,
        )
        prefixes = {"java": "j4", "go": "g2", "alions": "ons"}
        topics = [t for name in chosen for t in topic_names(prefixes[name]).values()]
        rows += guarded("mqadmin", lambda: mqadmin(apache, root / "mqadmin-home", topics))
        samples = []
        for name in chosen:
            print(f"running the {name} driver ...", flush=True)
            home = root / f"{name}-home"
            home.mkdir(parents=True, exist_ok=True)

            def one(name=name, home=home) -> list[Row]:
                driver_rows, sample = DRIVERS[name](apache, home)
                samples.append(sample)
                return driver_rows

            rows += guarded(name, one)
        if samples:
            home = root / "mqadmin-home"
            rows += guarded("mqadmin", lambda: mqadmin_after(apache, home, samples))
    print(table(rows))
    kept = root if args.keep else "a removed directory"
    print(f"({time.monotonic() - started:.0f} s; logs in {kept})")
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
