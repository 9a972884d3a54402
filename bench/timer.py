"""Delayed-message benchmark: ``python -m bench.timer --json [--quick]``.

Starts a real node process (ASYNC_FLUSH, the default; a temporary data directory, a free
port), drives it over gRPC from this process, stops it with SIGTERM, and prints one JSON
object (last line). Client and node share the machine's cores. Phases:

1. **Baseline.** Two closed-loop probes on other topics, one request at a time: a send of
   one 1 KiB message (``send``) and an empty ``Data.Fetch`` that answers at once
   (``probe``). Their latencies, and the longest gap between two answers of the probe, are
   the figures of an idle node.
2. **Lateness under normal load.** Delayed messages with distinct due times (one every few
   ms over a few seconds) consumed by long-polling ``Data.Fetch`` readers, one per queue,
   while the send probe runs. Lateness is the time this process holds the message minus
   its due time (``delivery_lateness_*_ms``); ``early_deliveries`` counts messages held
   before their due time (must be 0). ``release_lateness_max_ms`` is the node's side: the
   stored copy's timestamp minus the due time.
3. **Backlog.** ``backlog_messages`` delayed messages, all due at the same whole second,
   sent in batches well before it. From that second on, long-polling readers consume the
   topic while the probes run: ``backlog_release_s`` is from the due second to the last
   message held by a reader; ``concurrent_*`` are the probes' figures over that window, to
   compare with ``baseline_*``. Afterwards every message is checked: delivered exactly once
   and in send order per queue.
4. **In process.** The same backlog parked in a store opened in this process and released
   by the node's ``TimerService`` on this process's event loop with a ticker task beside
   it: ``inprocess_loop_max_gap_ms`` is the longest the loop went without running the
   ticker (the event-loop stall itself, free of gRPC and of the other process).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import shutil
import signal
import statistics
import tempfile
import time

import grpc

from ferrymq.client.messages import decode_records
from ferrymq.launcher.node_process import start_node_process
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.protocol.ferrymq import admin_pb2_grpc, data_pb2_grpc
from ferrymq.protocol.ferrymq import data_pb2 as data

GROUP = "BenchTimerGroup"
BACKLOG_TOPIC = "BenchBacklog"
LATE_TOPIC = "BenchLate"
OTHER_TOPIC = "BenchOther"
PROBE_TOPIC = "BenchProbe"
SIZING_TOPIC = "BenchSizing"
BACKLOG_QUEUES = 8
LATE_QUEUES = 4
PER_REQUEST = 128
SEND_BODY = bytes(range(256)) * 4  # the probe's 1 KiB message
BACKLOG_PAD = b"." * 90  # backlog bodies: a 10-digit sequence number and this, 100 bytes
FETCH_MAX = 4096
WAIT_MS = 1000


def now_ms() -> float:
    return time.time_ns() / 1e6


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def delayed(topic: str, sequence: int, queue_id: int, due_ms: int, body: bytes) -> pb.Message:
    message = pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        system_properties=pb.SystemProperties(
            message_id=f"TB{sequence:030X}",
            message_type=pb.DELAY,
            tag="T",
            queue_id=queue_id,
            body_encoding=pb.IDENTITY,
        ),
    )
    message.system_properties.delivery_timestamp.seconds = due_ms // 1000
    message.system_properties.delivery_timestamp.nanos = (due_ms % 1000) * 1_000_000
    return message


def sequence_of(body: bytes) -> int:
    return int(body[:10])


class Probe:
    """One request at a time, closed loop; keeps (start, end) of every answer."""

    def __init__(self, call) -> None:
        self.call = call
        self.samples: list[tuple[float, float]] = []
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self.samples = []
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        while True:
            started = time.perf_counter()
            await self.call()
            self.samples.append((started, time.perf_counter()))

    def figures(self, prefix: str, since: float = 0.0, until: float = float("inf")) -> dict:
        """Latency percentiles (µs) of requests started in [since, until] and the longest
        gap between two consecutive answers (ms) in it."""
        chosen = [(s, e) for s, e in self.samples if since <= s <= until]
        if not chosen:
            return {f"{prefix}_count": 0}
        took = [(e - s) * 1e6 for s, e in chosen]
        ends = [e for _, e in chosen]
        gaps = [b - a for a, b in itertools.pairwise(ends)] or [0.0]
        return {
            f"{prefix}_count": len(chosen),
            f"{prefix}_p50_us": round(statistics.median(took)),
            f"{prefix}_p99_us": round(percentile(took, 0.99)),
            f"{prefix}_max_us": round(max(took)),
            f"{prefix}_max_gap_ms": round(max(gaps) * 1000, 1),
        }


class Readers:
    """Long-polling ``Data.Fetch`` readers, one per queue, from offset 0: what a consumer
    of the topic holds, and when."""

    def __init__(self, stub, topic: str, queues: int, decode_now: bool) -> None:
        self.stub, self.topic, self.queues = stub, topic, queues
        self.decode_now = decode_now
        self.count = 0
        self.first_ms: float | None = None
        self.last_ms: float | None = None
        self.chunks: dict[int, list[bytes]] = {q: [] for q in range(queues)}
        self.arrivals: list[tuple[float, list]] = []  # (held at ms, records) if decode_now
        self._tasks: list[asyncio.Task] = []
        self.done = asyncio.Event()
        self.expected = 0

    def start(self, expected: int) -> None:
        self.expected = expected
        self._tasks = [asyncio.ensure_future(self._read(q)) for q in range(self.queues)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _read(self, queue_id: int) -> None:
        offset = 0
        while True:
            answer = await self.stub.Fetch(
                data.FetchRequest(
                    group=GROUP,
                    topic=self.topic,
                    queue_id=queue_id,
                    offset=offset,
                    max_messages=FETCH_MAX,
                    wait_ms=WAIT_MS,
                )
            )
            held_ms = now_ms()
            if answer.code not in (pb.OK, pb.MESSAGE_NOT_FOUND):
                raise RuntimeError(f"Fetch {self.topic}/{queue_id}: {answer.code} {answer.message}")
            offset = answer.next_offset
            if not answer.count:
                continue
            if self.decode_now:
                self.arrivals.append((held_ms, decode_records(answer.records)))
            else:
                self.chunks[queue_id].append(answer.records)
            if self.first_ms is None:
                self.first_ms = held_ms
            self.count += answer.count
            if self.count >= self.expected:
                self.last_ms = held_ms
                self.done.set()


async def send_batches(stub, requests) -> None:
    for request in requests:
        answer = await stub.SendMessage(request)
        assert answer.status.code == pb.OK, answer.status


def backlog_requests(queue_id: int, count: int, due_ms: int):
    """This queue's share of the backlog (sequence numbers ``queue_id`` mod queues), built
    lazily so a million messages never sit in memory at once."""
    sequences = range(queue_id, count, BACKLOG_QUEUES)
    for start in range(0, len(sequences), PER_REQUEST):
        yield rpc.SendMessageRequest(
            messages=[
                delayed(BACKLOG_TOPIC, s, queue_id, due_ms, b"%010d" % s + BACKLOG_PAD)
                for s in sequences[start : start + PER_REQUEST]
            ]
        )


async def measure(address: str, quick: bool, backlog: int = 0) -> dict:
    backlog = backlog or (50_000 if quick else 1_000_000)
    late_count = 1000 if quick else 3000
    late_spread_ms = 3000 if quick else 6000
    baseline_s = 2.0 if quick else 4.0
    figures: dict = {"backlog_messages": backlog}
    options = [("grpc.max_receive_message_length", 64 << 20)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        admin = admin_pb2_grpc.AdminStub(channel)
        fetch = data_pb2_grpc.DataStub(channel)
        for name, queues, kind in (
            (BACKLOG_TOPIC, BACKLOG_QUEUES, api.DELAY),
            (LATE_TOPIC, LATE_QUEUES, api.DELAY),
            (OTHER_TOPIC, 4, api.NORMAL),
            (PROBE_TOPIC, 1, api.NORMAL),
            (SIZING_TOPIC, 1, api.DELAY),
        ):
            topic = api.Topic(name=name, queue_count=queues, message_type=kind)
            answer = await admin.CreateTopic(api.CreateTopicRequest(topic=topic))
            assert answer.status.code == 0, answer.status
        answer = await admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name=GROUP)))
        assert answer.status.code == 0, answer.status

        sent = 0

        async def send_one() -> None:
            nonlocal sent
            sent += 1
            message = pb.Message(
                topic=pb.Resource(name=OTHER_TOPIC),
                body=SEND_BODY,
                system_properties=pb.SystemProperties(
                    message_id=f"TS{sent:030X}", message_type=pb.NORMAL, queue_id=sent % 4
                ),
            )
            answer = await stub.SendMessage(rpc.SendMessageRequest(messages=[message]))
            assert answer.status.code == pb.OK, answer.status

        empty = data.FetchRequest(group=GROUP, topic=PROBE_TOPIC, queue_id=0, max_messages=1)

        async def probe_one() -> None:
            answer = await fetch.Fetch(empty)
            assert answer.code == pb.MESSAGE_NOT_FOUND, answer

        sender, probe = Probe(send_one), Probe(probe_one)
        for _ in range(2000):  # warm up both sides
            await send_one()

        # 1. Baseline: an idle node.
        sender.start()
        probe.start()
        await asyncio.sleep(baseline_s)
        await sender.stop()
        await probe.stop()
        figures.update(sender.figures("baseline_send"))
        figures.update(probe.figures("baseline_probe"))

        # 2. Lateness of distinct due times under normal load (the send probe).
        figures.update(await lateness(stub, fetch, sender, late_count, late_spread_ms))

        # 3. The backlog. Time a few batches first (parked an hour ahead, on a topic of
        # their own) to pick a due second the whole backlog is sent well before.
        sizing = [
            rpc.SendMessageRequest(
                messages=[
                    delayed(SIZING_TOPIC, s, 0, int(now_ms()) + 3_600_000, b"%010d" % s)
                    for s in range(r * PER_REQUEST, (r + 1) * PER_REQUEST)
                ]
            )
            for r in range(64)
        ]
        started = time.perf_counter()
        # As the backlog goes: 8 senders.
        await asyncio.gather(*(send_batches(stub, sizing[q::8]) for q in range(8)))
        per_s = len(sizing) * PER_REQUEST / (time.perf_counter() - started)
        readers = Readers(fetch, BACKLOG_TOPIC, BACKLOG_QUEUES, decode_now=False)
        # A two-fold margin: the machine is shared, and a message sent after its due time
        # is not parked at all (it goes straight to its topic, ahead of the backlog).
        due_ms = int((now_ms() + 2 * backlog / per_s * 1000 + 3000) // 1000 * 1000 + 1000)
        send_started = now_ms()
        await asyncio.gather(
            *(send_batches(stub, backlog_requests(q, backlog, due_ms)) for q in range(8))
        )
        sent_ms = now_ms()
        figures["backlog_send_s"] = round((sent_ms - send_started) / 1000, 2)
        figures["backlog_sent_before_due_s"] = round((due_ms - sent_ms) / 1000, 2)
        figures["valid"] = sent_ms < due_ms - 500
        if not figures["valid"]:
            figures["warning"] = "the backlog was still being sent at its due time"
        await asyncio.sleep(max(0.0, (due_ms - now_ms()) / 1000 - 1.0))
        readers.start(backlog)
        sender.start()
        probe.start()
        await asyncio.sleep(max(0.0, (due_ms - now_ms()) / 1000))
        window_start = time.perf_counter()
        await asyncio.wait_for(readers.done.wait(), 600)
        window_end = time.perf_counter()
        await sender.stop()
        await probe.stop()
        await readers.stop()
        release_s = (readers.last_ms - due_ms) / 1000
        figures["backlog_release_s"] = round(release_s, 2)
        figures["backlog_release_msgs_per_s"] = round(backlog / release_s)
        figures["backlog_first_held_after_due_ms"] = round(readers.first_ms - due_ms, 1)
        figures.update(sender.figures("concurrent_send", window_start, window_end))
        figures.update(probe.figures("concurrent_probe", window_start, window_end))
        figures.update(check_backlog(readers, backlog, due_ms))
    return figures


def check_backlog(readers: Readers, count: int, due_ms: int) -> dict:
    """Every backlog message held exactly once, in send order per queue, never early."""
    seen = bytearray(count)
    duplicates = missing = out_of_order = early = 0
    store_last_ms = 0
    for queue_id, chunks in readers.chunks.items():
        previous = -1
        for chunk in chunks:
            for record in decode_records(chunk):
                sequence = sequence_of(record.body)
                if seen[sequence]:
                    duplicates += 1
                seen[sequence] = 1
                if sequence <= previous or sequence % BACKLOG_QUEUES != queue_id:
                    out_of_order += 1
                previous = sequence
                early += record.store_timestamp_ms < due_ms
                store_last_ms = max(store_last_ms, record.store_timestamp_ms)
    missing = count - sum(seen)
    return {
        "backlog_duplicates": duplicates,
        "backlog_missing": missing,
        "backlog_out_of_order": out_of_order,
        "backlog_early": early,
        "backlog_release_store_s": round((store_last_ms - due_ms) / 1000, 2),
    }


async def lateness(stub, fetch, sender: Probe, count: int, spread_ms: int) -> dict:
    """``count`` messages due one every ``spread_ms / count`` ms from one second ahead."""
    first_due = int(now_ms()) + 1500
    due = {s: first_due + s * spread_ms // count for s in range(count)}
    readers = Readers(fetch, LATE_TOPIC, LATE_QUEUES, decode_now=True)
    readers.start(count)
    sender.start()
    requests = []
    for queue_id in range(LATE_QUEUES):
        sequences = list(range(queue_id, count, LATE_QUEUES))
        for start in range(0, len(sequences), PER_REQUEST):
            chunk = sequences[start : start + PER_REQUEST]
            requests.append(
                rpc.SendMessageRequest(
                    messages=[delayed(LATE_TOPIC, s, queue_id, due[s], b"%010d" % s) for s in chunk]
                )
            )
    await send_batches(stub, requests)
    assert now_ms() < first_due, "the delayed messages were not all sent before the first due"
    await asyncio.wait_for(readers.done.wait(), spread_ms / 1000 + 60)
    await sender.stop()
    await readers.stop()
    late, release_late, early = [], [], 0
    seen: set[int] = set()
    for held_ms, records in readers.arrivals:
        for record in records:
            sequence = sequence_of(record.body)
            assert sequence not in seen, "a delayed message arrived twice"
            seen.add(sequence)
            late.append(held_ms - due[sequence])
            release_late.append(record.store_timestamp_ms - due[sequence])
            early += held_ms < due[sequence]
    assert len(seen) == count
    figures = {
        "delivery_messages": count,
        "delivery_spread_s": spread_ms / 1000,
        "delivery_lateness_p50_ms": round(statistics.median(late), 1),
        "delivery_lateness_p99_ms": round(percentile(late, 0.99), 1),
        "delivery_lateness_max_ms": round(max(late), 1),
        "early_deliveries": early,
        "release_lateness_max_ms": max(release_late),
    }
    figures.update(sender.figures("delivery_load_send"))
    return figures


def in_process(count: int) -> dict:
    """Park ``count`` messages due together in a store opened here, release them with the
    node's TimerService, and time the event loop's longest gap while it does."""
    from node.timer_service import TimerService
    from store.config import StoreConfig
    from store.message import Message
    from store.message_store import MessageStore

    directory = tempfile.mkdtemp(prefix="ferrymq-bench-timer-")
    clock = [int(now_ms())]
    loop = asyncio.new_event_loop()
    store = MessageStore.open(StoreConfig(os.path.join(directory, "data")))
    try:
        timers = TimerService(store, lambda topic: True, lambda: clock[0])
        timers.load(loop)
        due_ms = clock[0] + 1000
        for start in range(0, count, 512):
            batch = [
                TimerService.park(
                    Message.build(
                        BACKLOG_TOPIC,
                        b"%010d" % s + BACKLOG_PAD,
                        queue_id=s % BACKLOG_QUEUES,
                        tags="T",
                        unique_key=f"TB{s:030X}",
                    ),
                    due_ms,
                )
                for s in range(start, min(count, start + 512))
            ]
            assert store.put_messages(batch).ok
        loop.run_until_complete(asyncio.sleep(0))
        assert timers.pending == count
        clock[0] = due_ms
        gaps: list[tuple[float, float]] = []  # (wall, this thread's CPU) between ticks
        puts: list[float] = []
        releasing = True

        async def ticker() -> None:
            last, last_cpu = time.perf_counter(), time.thread_time()
            while releasing:
                await asyncio.sleep(0)
                tick, tick_cpu = time.perf_counter(), time.thread_time()
                gaps.append((tick - last, tick_cpu - last_cpu))
                last, last_cpu = tick, tick_cpu

        async def other_traffic() -> None:
            # Stopped by the flag, not cancelled: a put stays in the store's combiner.
            while releasing:
                started = time.perf_counter()
                result = await store.put_messages_async([Message(OTHER_TOPIC, SEND_BODY)])
                assert result.ok
                puts.append(time.perf_counter() - started)

        async def release() -> float:
            nonlocal releasing
            tasks = [asyncio.ensure_future(ticker()), asyncio.ensure_future(other_traffic())]
            await asyncio.sleep(0)
            started = time.perf_counter()
            assert await timers.deliver_due()
            took = time.perf_counter() - started
            releasing = False
            await asyncio.gather(*tasks)
            return took

        took = loop.run_until_complete(release())
        assert timers.pending == 0
        delivered = sum(store.max_offset_in_queue(BACKLOG_TOPIC, q) for q in range(8))
        assert delivered == count, delivered
        return {
            "inprocess_release_s": round(took, 2),
            "inprocess_release_msgs_per_s": round(count / took),
            "inprocess_loop_max_gap_ms": round(max(g for g, _ in gaps) * 1000, 2),
            "inprocess_loop_p99_gap_ms": round(percentile([g for g, _ in gaps], 0.99) * 1000, 2),
            # The longest turn counting only this thread's CPU: the release's own work,
            # without the time the OS ran something else.
            "inprocess_loop_max_cpu_gap_ms": round(max(c for _, c in gaps) * 1000, 2),
            "inprocess_put_p99_us": round(percentile(puts, 0.99) * 1e6) if puts else None,
            "inprocess_put_max_us": round(max(puts) * 1e6) if puts else None,
            "inprocess_puts_during_release": len(puts),
        }
    finally:
        store.shutdown()
        loop.close()
        shutil.rmtree(directory, ignore_errors=True)


def run(quick: bool, backlog: int = 0) -> dict:
    load_before = os.getloadavg()
    directory = tempfile.mkdtemp(prefix="ferrymq-bench-timer-")
    node = start_node_process(os.path.join(directory, "node"), timeout_s=60)
    process, address = node.process, node.address
    try:
        figures = asyncio.run(measure(address, quick, backlog))
    finally:
        process.send_signal(signal.SIGTERM)
        exit_code = process.wait(120)
        shutil.rmtree(directory, ignore_errors=True)
    figures["node_exit_code"] = exit_code
    figures.update(in_process(figures["backlog_messages"]))
    figures["flush_mode"] = "ASYNC_FLUSH"
    figures["quick"] = quick
    figures["load_avg_1m_before_after"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    figures["machine"] = (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument("--quick", action="store_true", help="smaller run (under 60 s)")
    parser.add_argument("--backlog", type=int, default=0, help="backlog size instead")
    args = parser.parse_args()
    figures = run(args.quick, args.backlog)
    if not args.json:
        for name, value in figures.items():
            print(f"{name:40} {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
