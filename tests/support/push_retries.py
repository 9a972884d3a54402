"""One PushConsumer scenario every official 5.x client driver runs (Java and Go today): a
normal group's consumer fails one message, which comes back (attempt 2) and is then
dead-lettered while the others are consumed once; a FIFO group's consumer gets each
message group in order, its failing message retried and then dead-lettered without
blocking the rest of its group.

A driver step list in, assertions on its ``clients.Run`` out, beside ``every_kind`` (the
producer and SimpleConsumer scenario). ``ok-0``'s CRC32 starts with a zero nibble: the
Java and Go clients write a CRC32 without leading zeros and discard a message whose
digest differs, so a server digest they cannot match loses it here."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ferrymq.protocol.ferrymq import admin_pb2 as api
from tests.support.clients import Run
from tests.support.rpc import create_group, create_topic, pull

MAX_DELIVERY_ATTEMPTS = 2


def dead_letters(messaging, group: str, reader: str, count: int, wait_s: float = 20) -> list:
    """The first ``count`` messages of ``group``'s dead-letter queue (queue 0), polled
    until they are there or ``wait_s`` passed."""
    deadline = time.monotonic() + wait_s
    dead: list = []
    while len(dead) < count and time.monotonic() < deadline:
        _, dead, _ = pull(messaging, f"%DLQ%{group}", 0, 0, group=reader, wait_s=1)
    return dead


@dataclass
class PushRetries:
    """The scenario for one client, its topics and groups named after ``prefix``."""

    prefix: str
    normal_ok: list[str] = field(default_factory=lambda: ["ok-0", "ok-1", "ok-2"])
    poison: str = "poison"
    fifo_bodies: list[str] = field(
        default_factory=lambda: [f"{g}-{i}" for i in range(4) for g in ("a", "b")]
    )
    fifo_poison: str = "b-1"

    @property
    def topic(self) -> str:
        return f"{self.prefix}-push"

    @property
    def fifo_topic(self) -> str:
        return f"{self.prefix}-push-fifo"

    @property
    def group(self) -> str:
        return f"{self.prefix}-push-group"

    @property
    def fifo_group(self) -> str:
        return f"{self.prefix}-fifo-push-group"

    @property
    def dlq_reader(self) -> str:
        return f"{self.prefix}-dlq-reader"

    def create(self, admin) -> None:
        """Its topics and groups (each retrying a failed message once), as ferrymq
        requires them before use."""
        create_topic(admin, self.topic, queues=2)
        create_topic(admin, self.fifo_topic, queues=2, message_type=api.FIFO)
        create_group(admin, self.group, max_delivery_attempts=MAX_DELIVERY_ATTEMPTS)
        create_group(admin, self.fifo_group, fifo=True, max_delivery_attempts=MAX_DELIVERY_ATTEMPTS)
        create_group(admin, self.dlq_reader)

    def steps(self) -> list[dict]:
        normal = [
            {"topic": self.topic, "body": b, "tag": "P", "keys": [b]}
            for b in [*self.normal_ok, self.poison]
        ]
        fifo = [
            {"topic": self.fifo_topic, "body": b, "group": b.split("-")[0]}
            for b in self.fifo_bodies
        ]
        consumers = [
            {
                "topic": self.topic,
                "group": self.group,
                "fail": [self.poison],
                "fail_attempts": MAX_DELIVERY_ATTEMPTS,
                "expect": self.normal_ok,
            },
            {
                "topic": self.fifo_topic,
                "group": self.fifo_group,
                "fail": [self.fifo_poison],
                "fail_attempts": MAX_DELIVERY_ATTEMPTS,
                "expect": [b for b in self.fifo_bodies if b != self.fifo_poison],
            },
        ]
        return [
            {"do": "produce", "messages": normal + fifo},
            {"do": "push", "deadline_s": 40, "linger_s": 3, "consumers": consumers},
        ]

    def check(self, run: Run, messaging) -> None:
        """Each good message consumed once, intact; each failing one retried, then found
        in its group's dead-letter queue; FIFO order kept per message group."""
        assert not run.of("step_failed") and not run.of("send_failed"), run.explain()
        assert [e["all_seen"] for e in run.of("push_waited")] == [True, True], run.explain()
        consumed = [e for e in run.of("consumed") if e["topic"] == self.topic]
        assert {e["consumer_group"] for e in consumed} == {self.group}, run.explain()
        poison = [e["attempt"] for e in consumed if e["body"] == self.poison]
        assert poison[:MAX_DELIVERY_ATTEMPTS] == [1, 2], run.explain()
        for body in self.normal_ok:
            (one,) = [e for e in consumed if e["body"] == body]
            assert (one["attempt"], one["tag"], one["keys"]) == (1, "P", [body]), run.explain()
        dead = dead_letters(messaging, self.group, self.dlq_reader, 1)
        assert [m.body.decode() for m in dead] == [self.poison]

        fifo_consumed = [e for e in run.of("consumed") if e["topic"] == self.fifo_topic]
        for g in ("a", "b"):
            firsts: list[str] = []
            for e in fifo_consumed:
                if e["group"] == g and not e["failed"] and e["body"] not in firsts:
                    firsts.append(e["body"])
            wanted = [b for b in self.fifo_bodies if b.startswith(g) and b != self.fifo_poison]
            assert firsts == wanted, run.explain()
        retried = [e["attempt"] for e in fifo_consumed if e["body"] == self.fifo_poison]
        assert retried[:MAX_DELIVERY_ATTEMPTS] == [1, 2], run.explain()
        dead = dead_letters(messaging, self.fifo_group, self.dlq_reader, 1)
        assert [m.body.decode() for m in dead] == [self.fifo_poison]
