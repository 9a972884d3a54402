"""The most unary RPCs per second gRPC for Python serves here: ``python -m bench.grpc_ceiling
--json``. A node's single-message sends can never beat this ceiling, so it is the yardstick
for ``single_send_256_inflight_msgs_per_s`` in ``bench.produce``.

A server process answers SendMessage with a constant response and does nothing else (no
store, no validation); this process sends the same 1 KiB single-message requests as
``bench.produce``, 256 in flight. Measured for the grpc.aio server (the node's) and for the
thread-pool server. Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time

import grpc

from bench.node_process import ROOT
from bench.produce import single_requests
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc

SERVER = r"""
import asyncio, sys
from concurrent import futures
import grpc
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc, service_pb2_grpc
OK = pb.Status(code=pb.OK)
ENTRY = rpc.SendResultEntry(status=OK, message_id="x")
ANSWER = rpc.SendMessageResponse(status=OK, entries=[ENTRY])
class AsyncNoop(service_pb2_grpc.MessagingServiceServicer):
    async def SendMessage(self, request, context):
        return ANSWER
class ThreadNoop(service_pb2_grpc.MessagingServiceServicer):
    def SendMessage(self, request, context):
        return ANSWER
async def serve_aio():
    server = grpc.aio.server()
    service_pb2_grpc.add_MessagingServiceServicer_to_server(AsyncNoop(), server)
    print(server.add_insecure_port("127.0.0.1:0"), flush=True)
    await server.start()
    await server.wait_for_termination()
if sys.argv[1] == "aio":
    asyncio.run(serve_aio())
else:
    server = grpc.server(futures.ThreadPoolExecutor(4))
    service_pb2_grpc.add_MessagingServiceServicer_to_server(ThreadNoop(), server)
    print(server.add_insecure_port("127.0.0.1:0"), flush=True)
    server.start()
    server.wait_for_termination()
"""


async def drive(port: int, count: int, in_flight: int) -> float:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        requests = iter(single_requests(count, 0))

        async def worker() -> None:
            for request in requests:
                await stub.SendMessage(request)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return count / (time.perf_counter() - started)


def measure(kind: str, count: int) -> int:
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, kind], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        port = int(server.stdout.readline())
        asyncio.run(drive(port, 2000, 64))  # warm up
        return round(asyncio.run(drive(port, count, 256)))
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    count = 10_000 if args.quick else 40_000
    figures = {
        "noop_aio_server_256_inflight_rpcs_per_s": measure("aio", count),
        "noop_thread_server_256_inflight_rpcs_per_s": measure("threads", count),
    }
    if not args.json:
        for name, value in figures.items():
            print(f"{name:45} {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
