"""Node benchmark over gRPC: ``python -m bench.produce --json [--quick] [--client-tls off]``.

Starts a real node process (ASYNC_FLUSH, the default; a temporary data directory, a free
port) and drives it from this process with grpc.aio stubs and requests built before the
clock starts, so the client spends its time on the wire, not on building messages. Client
and node share the machine's cores. Prints one JSON object (last line):

- ``batch_send_msgs_per_s``: ferrymq's ``Data.Produce`` (what the SDK's ``send_batch``
  uses), 128 records of 1 KiB per request, 8 requests in flight, records encoded up front;
- ``batch_send_sdk_msgs_per_s``: the same through ``Producer.send_batch_async``, messages
  built up front and encoded inside the clock;
- ``batch_send_message_rpc_msgs_per_s``: apache.rocketmq.v2 SendMessage with 128 messages
  per request, 8 in flight (the official clients' path);
- ``single_send_256_inflight_msgs_per_s``: 256 asyncio callers, each awaiting
  ``Producer.send_async`` of one message at a time; the SDK coalesces sends made while
  its earlier requests are in flight (each caller still gets its own receipt);
- ``single_send_256_inflight_one_rpc_msgs_per_s``: strictly one SendMessage RPC per
  message, 256 in flight (bounded by gRPC for Python's unary-RPC rate, bench.grpc_ceiling);
- ``single_send_p50_us`` / ``single_send_p99_us``: latency of one 1 KiB message per
  SendMessage request, one request at a time (an unloaded node);
- ``single_send_sdk_p50_us``: the same with ``Producer.send_async`` (one Produce each);
- ``*_node_cpu_us_per_msg`` / ``*_client_cpu_us_per_msg``: CPU time per message of the
  node process and of this client over a phase (less sensitive to other load than rates);
- ``pull_msgs_per_s``: offset-based reads as ferrymq's PullConsumer makes them (Data.Fetch,
  512 records per request, decoded in the client), one reader per queue, from offset 0;
- ``pull_message_rpc_msgs_per_s``: the same through apache.rocketmq.v2 PullMessage (32 per
  request, one gRPC message per message: the official protocol's shape);
- ``pop_receive_ack_msgs_per_s``: ReceiveMessage (32) then one AckMessage for the batch,
  4 consumers of one group.

Every message has a tag, a key and a unique message id, as the official clients send.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import signal
import statistics
import tempfile
import time

import grpc

from bench.cpu import process_cpu_s
from ferrymq.client import Message, Producer
from ferrymq.client.messages import decode_records
from ferrymq.client.produce_records import encode_record
from ferrymq.launcher.node_process import start_node_process
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from ferrymq.protocol.ferrymq import admin_pb2_grpc, data_pb2_grpc
from ferrymq.protocol.ferrymq import data_pb2 as data

BODY = bytes(range(256)) * 4  # 1 KiB
TOPIC = "BenchTopic"
GROUP = "BenchGroup"
QUEUES = 8


class CpuMeter:
    """CPU microseconds per message of the node and of this client over one phase: less
    sensitive than wall-clock rates to other work on the machine."""

    def __init__(self, node_pid: int, figures: dict) -> None:
        self.node_pid = node_pid
        self.figures = figures

    def start(self) -> None:
        self.node_s = process_cpu_s(self.node_pid)
        self.client_s = time.process_time()

    def stop(self, name: str, messages: int) -> None:
        node = process_cpu_s(self.node_pid) - self.node_s
        client = time.process_time() - self.client_s
        self.figures[f"{name}_node_cpu_us_per_msg"] = round(node / messages * 1e6, 2)
        self.figures[f"{name}_client_cpu_us_per_msg"] = round(client / messages * 1e6, 2)


def wire_message(i: int, queue_id: int) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=TOPIC),
        body=BODY,
        system_properties=pb.SystemProperties(
            message_id=f"BE{i:032X}",
            message_type=pb.NORMAL,
            tag="TagA" if i % 2 else "TagB",
            keys=[f"key-{i}"],
            queue_id=queue_id,
            body_encoding=pb.IDENTITY,
        ),
    )


def single_requests(count: int, start: int) -> list[rpc.SendMessageRequest]:
    return [
        rpc.SendMessageRequest(messages=[wire_message(start + i, (start + i) % QUEUES)])
        for i in range(count)
    ]


def batch_requests(count: int, per_request: int, start: int) -> list[rpc.SendMessageRequest]:
    requests = []
    for r in range(count):
        first = start + r * per_request
        messages = [wire_message(first + i, r % QUEUES) for i in range(per_request)]
        requests.append(rpc.SendMessageRequest(messages=messages))
    return requests


def sdk_message(i: int) -> Message:
    """What ``wire_message`` sends, as an SDK user writes it."""
    return Message(
        TOPIC, BODY, tag="TagA" if i % 2 else "TagB", keys=[f"key-{i}"], message_id=f"BE{i:032X}"
    )


def produce_requests(count: int, per_request: int, start: int) -> list[data.ProduceRequest]:
    """Data.Produce requests as the SDK builds them (records encoded up front, as the
    SendMessage phases build their protobuf messages up front)."""
    requests = []
    born_ms = time.time_ns() // 1_000_000
    for r in range(count):
        first = start + r * per_request
        records = b"".join(
            encode_record(sdk_message(first + i), pb.NORMAL, born_ms) for i in range(per_request)
        )
        requests.append(
            data.ProduceRequest(
                topic=TOPIC, queue_id=r % QUEUES, count=per_request, records=records, atomic=True
            )
        )
    return requests


async def produce_all(stub, requests, in_flight: int) -> float:
    queue = iter(requests)

    async def worker() -> None:
        for request in queue:
            answer = await stub.Produce(request)
            assert answer.code == pb.OK and len(answer.offsets) == request.count, answer.message

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return time.perf_counter() - started


async def sdk_send_batches(producer: Producer, batches, in_flight: int) -> float:
    queue = iter(batches)

    async def worker() -> None:
        for batch in queue:
            receipts = await producer.send_batch_async(batch)
            assert len(receipts) == len(batch)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return time.perf_counter() - started


async def sdk_send_each(producer: Producer, messages, in_flight: int) -> float:
    """``in_flight`` callers, each awaiting ``send_async`` of one message at a time."""
    queue = iter(messages)

    async def caller() -> None:
        for message in queue:
            receipt = await producer.send_async(message)
            assert receipt.queue_offset >= 0

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(in_flight)))
    return time.perf_counter() - started


async def send_all(stub, requests, in_flight: int) -> float:
    """Send every request with ``in_flight`` outstanding; seconds taken."""
    queue = iter(requests)

    async def worker() -> None:
        for request in queue:
            answer = await stub.SendMessage(request)
            assert answer.status.code == pb.OK, answer.status

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return time.perf_counter() - started


async def latencies(stub, requests) -> list[float]:
    took = []
    for request in requests:
        started = time.perf_counter()
        answer = await stub.SendMessage(request)
        took.append(time.perf_counter() - started)
        assert answer.status.code == pb.OK
    return took


async def sdk_latencies(producer: Producer, messages) -> list[float]:
    took = []
    for message in messages:
        started = time.perf_counter()
        await producer.send_async(message)
        took.append(time.perf_counter() - started)
    return took


async def fetch_everything(data_stub) -> tuple[int, float]:
    """What ferrymq's PullConsumer does: Data.Fetch, 512 records per call, decoded here."""

    async def read_queue(queue_id: int) -> int:
        offset, count = 0, 0
        while True:
            answer = await data_stub.Fetch(
                data.FetchRequest(
                    group=GROUP, topic=TOPIC, queue_id=queue_id, offset=offset, max_messages=512
                )
            )
            if not answer.count:
                return count
            count += len(decode_records(answer.records))
            offset = answer.next_offset

    started = time.perf_counter()
    counts = await asyncio.gather(*(read_queue(q) for q in range(QUEUES)))
    return sum(counts), time.perf_counter() - started


async def pull_everything(stub) -> tuple[int, float]:
    async def read_queue(queue_id: int) -> int:
        offset, count = 0, 0
        while True:
            request = rpc.PullMessageRequest(
                group=pb.Resource(name=GROUP),
                message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=queue_id),
                offset=offset,
                batch_size=32,
                filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            )
            found, next_offset = 0, offset
            async for part in stub.PullMessage(request):
                kind = part.WhichOneof("content")
                if kind == "message":
                    found += 1
                elif kind == "next_offset":
                    next_offset = part.next_offset
            if not found:
                return count
            count, offset = count + found, next_offset

    started = time.perf_counter()
    counts = await asyncio.gather(*(read_queue(q) for q in range(QUEUES)))
    return sum(counts), time.perf_counter() - started


async def pop_and_ack(stub, total: int, consumers: int = 4) -> tuple[int, float]:
    done = 0

    async def consume() -> None:
        nonlocal done
        while done < total:
            request = rpc.ReceiveMessageRequest(
                group=pb.Resource(name=GROUP),
                message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=-1),
                filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                batch_size=32,
            )
            request.invisible_duration.seconds = 60
            request.long_polling_timeout.seconds = 1
            entries = []
            async for part in stub.ReceiveMessage(request):
                if part.WhichOneof("content") == "message":
                    system = part.message.system_properties
                    entries.append(
                        rpc.AckMessageEntry(
                            message_id=system.message_id, receipt_handle=system.receipt_handle
                        )
                    )
            if not entries:
                return
            answer = await stub.AckMessage(
                rpc.AckMessageRequest(
                    group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC), entries=entries
                )
            )
            assert answer.status.code == pb.OK, answer.status
            done += len(entries)

    started = time.perf_counter()
    await asyncio.gather(*(consume() for _ in range(consumers)))
    return done, time.perf_counter() - started


async def measure(address: str, quick: bool, node_pid: int) -> dict:
    scale = 1 if quick else 4
    options = [("grpc.max_send_message_length", 64 << 20)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        admin = admin_pb2_grpc.AdminStub(channel)
        topic = api.Topic(name=TOPIC, queue_count=QUEUES)
        assert (await admin.CreateTopic(api.CreateTopicRequest(topic=topic))).status.code == 0
        group = api.Group(name=GROUP)
        assert (await admin.CreateGroup(api.CreateGroupRequest(group=group))).status.code == 0
        figures: dict = {}
        cpu = CpuMeter(node_pid, figures)
        sent = 0

        data_stub = data_pb2_grpc.DataStub(channel)
        producer = Producer(address)
        await send_all(stub, single_requests(2000, 10**9), 64)  # warm up both sides
        await produce_all(data_stub, produce_requests(16, 128, 2 * 10**9), 8)
        await sdk_send_each(producer, [sdk_message(3 * 10**9 + i) for i in range(2000)], 256)

        batches = produce_requests(100 * scale, 128, sent)
        cpu.start()
        seconds = await produce_all(data_stub, batches, 8)
        cpu.stop("batch_send", len(batches) * 128)
        figures["batch_send_msgs_per_s"] = round(len(batches) * 128 / seconds)
        sent += len(batches) * 128

        sdk_batches = [
            [sdk_message(sent + r * 128 + i) for i in range(128)] for r in range(100 * scale)
        ]
        seconds = await sdk_send_batches(producer, sdk_batches, 8)
        figures["batch_send_sdk_msgs_per_s"] = round(len(sdk_batches) * 128 / seconds)
        sent += len(sdk_batches) * 128

        batches = batch_requests(100 * scale, 128, sent)
        cpu.start()
        seconds = await send_all(stub, batches, 8)
        cpu.stop("batch_send_message_rpc", len(batches) * 128)
        figures["batch_send_message_rpc_msgs_per_s"] = round(len(batches) * 128 / seconds)
        sent += len(batches) * 128

        messages = [sdk_message(sent + i) for i in range(20_000 * scale)]
        cpu.start()
        seconds = await sdk_send_each(producer, messages, 256)
        cpu.stop("single_send_256_inflight", len(messages))
        figures["single_send_256_inflight_msgs_per_s"] = round(len(messages) / seconds)
        sent += len(messages)

        singles = single_requests(20_000 * scale, sent)
        cpu.start()
        seconds = await send_all(stub, singles, 256)
        cpu.stop("single_send_256_inflight_one_rpc", len(singles))
        figures["single_send_256_inflight_one_rpc_msgs_per_s"] = round(len(singles) / seconds)
        sent += len(singles)

        took = await latencies(stub, single_requests(2000 * scale, sent))
        sent += len(took)
        took.sort()
        figures["single_send_p50_us"] = round(statistics.median(took) * 1e6)
        figures["single_send_p99_us"] = round(took[int(len(took) * 0.99)] * 1e6)

        took = await sdk_latencies(producer, [sdk_message(sent + i) for i in range(2000 * scale)])
        sent += len(took)
        took.sort()
        figures["single_send_sdk_p50_us"] = round(statistics.median(took) * 1e6)
        producer.close()

        count, seconds = await fetch_everything(data_stub)
        figures["pull_msgs_per_s"] = round(count / seconds)
        figures["pull_messages"] = count
        count, seconds = await pull_everything(stub)
        figures["pull_message_rpc_msgs_per_s"] = round(count / seconds)

        count, seconds = await pop_and_ack(stub, 20_000 * scale)
        figures["pop_receive_ack_msgs_per_s"] = round(count / seconds)
        figures["pop_messages"] = count
        return figures


def run(quick: bool, client_tls: str = "") -> dict:
    """``client_tls``: the node's ``[security] client_tls`` ("": its default, optional)."""
    directory = tempfile.mkdtemp(prefix="ferrymq-bench-produce-")
    toml = f'[security]\nclient_tls = "{client_tls}"\n' if client_tls else ""
    node = start_node_process(os.path.join(directory, "node"), toml, timeout_s=60)
    process, address = node.process, node.address
    try:
        figures = asyncio.run(measure(address, quick, process.pid))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        shutil.rmtree(directory, ignore_errors=True)
    figures["flush_mode"] = "ASYNC_FLUSH"
    figures["client_tls"] = client_tls or "optional"
    figures["quick"] = quick
    figures["machine"] = (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print only the JSON object")
    parser.add_argument("--quick", action="store_true", help="smaller run (under 60 s)")
    parser.add_argument(
        "--client-tls",
        choices=("optional", "off"),
        default="",
        help="the node's client port: TLS and plaintext through the relay (optional, the"
        " default) or gRPC's own plaintext listener (off)",
    )
    args = parser.parse_args()
    figures = run(args.quick, args.client_tls)
    if not args.json:
        for name, value in figures.items():
            print(f"{name:40} {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
