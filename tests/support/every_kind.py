"""One scenario every official 5.x client driver runs (Java and Go today): normal sync
and async sends with tags, keys and properties, FIFO per message group, delays and
transactions (committed, rolled back, and one left for the node's check), then
SimpleConsumers that must receive each message once and intact.

A driver step list in, assertions on its ``clients.Run`` out; the drivers' specs are
alike by design (tests/compat/README.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.clients import Run
from tests.support.rpc import create_group, create_topic


def by_body(events: list[dict]) -> dict[str, dict]:
    return {e["body"]: e for e in events}


def simple_receive(topic: str, group: str, count: int) -> dict:
    """A driver step: one SimpleConsumer receiving (and acking) ``count`` messages."""
    op = {"op": "receive", "count": count, "invisible_s": 30, "deadline_s": 25, "ack": True}
    return {"do": "simple", "topic": topic, "group": group, "await_s": 2, "ops": [op]}


@dataclass
class EveryKind:
    """The scenario for one client, its topics and groups named after ``prefix``."""

    prefix: str
    normal: list[dict] = field(init=False)
    fifo: list[dict] = field(init=False)
    delays: list[dict] = field(init=False)
    transactions: list[dict] = field(init=False)

    def __post_init__(self) -> None:
        p = self.prefix
        self.normal = [
            {
                "topic": f"{p}-normal",
                "body": f"n{i}",
                "tag": f"Tag{i % 2}",
                "keys": [f"key-{i}", f"other-{i}"],
                "properties": {"color": f"c{i}", "unicode": "ü-✓"},
                "async": i % 2 == 1,
            }
            for i in range(6)
        ]
        self.fifo = [
            {"topic": f"{p}-fifo", "body": f"{g}-{i}", "group": g, "tag": "F"}
            for i in range(5)
            for g in ("ga", "gb")
        ]
        self.delays = [
            {"topic": f"{p}-delay", "body": f"d{ms}", "delay_ms": ms} for ms in (3000, 1000)
        ]
        self.transactions = [
            {"body": "committed", "end": "commit", "keys": ["tx-1"]},
            {"body": "rolled-back", "end": "rollback"},
            {"body": "orphan", "end": "none"},
        ]

    def create(self, admin) -> None:
        """Its topics and reader groups, as ferrymq requires them before use."""
        p = self.prefix
        create_topic(admin, f"{p}-normal", queues=4)
        create_topic(admin, f"{p}-fifo", queues=4, message_type=api.FIFO)
        create_topic(admin, f"{p}-delay", queues=2, message_type=api.DELAY)
        create_topic(admin, f"{p}-tx", queues=2, message_type=api.TRANSACTION)
        for kind in ("normal", "fifo", "delay", "tx"):
            create_group(admin, f"{p}-{kind}-reader", fifo=kind == "fifo")

    def steps(self) -> list[dict]:
        p = self.prefix
        return [
            {"do": "produce", "messages": self.normal + self.fifo + self.delays},
            {
                "do": "transaction",
                "topic": f"{p}-tx",
                "messages": self.transactions,
                "checker": "COMMIT",
                "checks": 1,
                "wait_for_check_s": 30,
            },
            simple_receive(f"{p}-normal", f"{p}-normal-reader", len(self.normal)),
            simple_receive(f"{p}-fifo", f"{p}-fifo-reader", len(self.fifo)),
            simple_receive(f"{p}-delay", f"{p}-delay-reader", len(self.delays)),
            simple_receive(f"{p}-tx", f"{p}-tx-reader", 2),
        ]

    def check(self, run: Run, *, reports_born_host_and_queue: bool) -> None:
        """Everything sent was received once, intact and in its rules' order.
        ``reports_born_host_and_queue``: the driver's events carry the sender's host and
        the queue a send landed in (the Go client reports neither usefully)."""
        p = self.prefix
        assert not run.of("step_failed") and not run.of("send_failed"), run.explain()
        sent = by_body(run.of("sent"))
        everything = self.normal + self.fifo + self.delays + self.transactions
        assert len(sent) == len(everything), run.explain()
        received = run.of("received")
        got = by_body(received)
        assert len(received) == len(got), run.explain()  # nothing twice

        for m in self.normal:
            r = got[m["body"]]
            assert r["id"] == sent[m["body"]]["id"]
            assert (r["topic"], r["tag"], sorted(r["keys"])) == (f"{p}-normal", m["tag"], m["keys"])
            assert r["properties"] == m["properties"], r
            assert r["attempt"] == 1
            assert r["born_host"] or not reports_born_host_and_queue
        assert {e["body"] for e in run.of("sent") if e["async"]} == {"n1", "n3", "n5"}

        fifo_received = [e for e in received if e["topic"] == f"{p}-fifo"]
        for g in ("ga", "gb"):
            in_order = [e["body"] for e in fifo_received if e.get("group") == g]
            assert in_order == [f"{g}-{i}" for i in range(5)], run.explain()
            if reports_born_host_and_queue:  # one message group, one queue
                assert len({sent[f"{g}-{i}"]["queue"] for i in range(5)}) == 1

        for m in self.delays:
            r = got[m["body"]]
            assert r["delivery_timestamp"], r
            # Not delivered before it was due (the driver sent it a few ms before due - delay).
            assert r["received_at"] >= r["delivery_timestamp"] - 50, r

        assert [e["body"] for e in run.of("checked")] == ["orphan"]
        assert [e["body"] for e in run.of("committed")] == ["committed"]
        assert [e["body"] for e in run.of("rolled_back")] == ["rolled-back"]
        tx_received = sorted(e["body"] for e in received if e["topic"] == f"{p}-tx")
        assert tx_received == ["committed", "orphan"], run.explain()
        assert got["committed"]["id"] == sent["committed"]["id"]
        assert got["committed"]["keys"] == ["tx-1"]
        assert all(e["body"] in got for e in run.of("acked"))
