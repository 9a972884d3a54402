"""What gRPC for Python allows here before any ferrymq code runs: ``python -m
bench.grpc_ceiling --json [--quick | --smoke]``.

Each figure is a floor (or a ceiling) for one figure of ``bench.produce`` or
``bench.cluster``: a server that does nothing can never be beaten by a node that does
something, so a target beyond these figures cannot be met on this machine by any node
written on gRPC for Python, and the distance to them is what ferrymq's own code costs.

The servers answer with a constant and store nothing (no validation, no CommitLog):

- ``os_round_trip_p50_us`` / ``_p99_us``: the machine's own floor under all the others:
  1 KiB to a process that echoes 16 bytes, over loopback TCP with blocking sockets, one at
  a time; ``os_round_trip_same_cpu_*`` the same with both processes on one CPU. The
  difference is what waking a process on an idle CPU costs here (every hop of a
  replicated send pays it when the cores are not busy).

- ``noop_aio_server_256_inflight_rpcs_per_s`` / ``noop_thread_server_...``: SendMessage of
  one 1 KiB message, 256 in flight, against the grpc.aio server (the node's) and the
  thread-pool server. Ceiling of ``single_send_256_inflight_one_rpc_msgs_per_s``.
- ``noop_single_send_p50_us`` / ``_p99_us``: the same requests one at a time through a
  grpc.aio channel, as ``bench.produce`` measures ``single_send_p50_us``.
- ``noop_uvloop_single_send_p50_us`` / ``_p99_us``: the same, the aio server running on
  uvloop (the nodes' loop).
- ``noop_remoting_uvloop_p50_us`` / ``_p99_us`` and ``noop_remoting_asyncio_p50_us`` /
  ``_p99_us``: one SEND_MESSAGE_V2 frame of 1 KiB at a time, from a blocking socket, to the
  node's remoting transport (``node/remoting/``) answering SUCCESS at once, on uvloop and
  on the default asyncio loop: the floor of a send over the remoting port.
- ``noop_sdk_remoting_produce_p50_us`` / ``_p99_us``: the SDK's own remoting channel
  (``ferrymq/client/remoting_channel.py``) sending one 1-record FERRY_PRODUCE at a time,
  as ``Producer.send`` does on the remoting door, to that no-op transport on uvloop: the
  floor of ``sync_single_send_p50_us`` (the SDK on remoting) before any node code.
- ``node_remoting_noop_p50_us`` / ``_p99_us``: the same channel asking a real node (one
  node process, on uvloop) a code it does not serve, answered REQUEST_CODE_NOT_SUPPORTED
  by its dispatch: a node's remoting round trip with nothing done.
- ``noop_produce_single_send_p50_us`` / ``_p99_us``: one 1-record Data.Produce at a time
  through a blocking channel, as ``Producer.send`` sends, answered at once (nothing stored,
  nothing replicated): the floor of ``sync_single_send_p50_us`` before replication.
- ``noop_replicated_single_send_p50_us`` / ``_p99_us``: a SYNC send's minimum: the aio
  server writes each Data.Produce request's records to two "slave" processes over TCP
  (asyncio streams, as ``ha/`` does) and answers once both have acknowledged; the slaves
  read each frame and acknowledge it. One 1-record request at a time through a blocking
  channel, as ``bench.cluster`` measures ``sync_single_send_p50_us`` (``Producer.send``).
- ``noop_replicated_batch_msgs_per_s``: the same server, 128 records of 1 KiB per request,
  16 requests in flight, the requests built before the clock starts. Ceiling of
  ``sync_batch_send_msgs_per_s`` (whose client also builds its messages on the clock).
- ``noop_remoting_replicated_single_send_p50_us`` / ``_p99_us`` and
  ``noop_remoting_replicated_batch_msgs_per_s``: the same SYNC minimum on the remoting
  door, everything on uvloop: the no-op remoting transport copies each FERRY_PRODUCE body
  to the two slaves and answers once both acknowledged; singles from the SDK's blocking
  channel, batches 16 in flight on one connection. The floor and ceiling of
  ``sync_single_send_p50_us`` and ``sync_batch_send_msgs_per_s`` as the SDK measures them.
- ``noop_remoting_replicated_end_to_end_p50_us`` / ``_p99_us``: the floor of
  ``end_to_end_p50_us``, measured as ``bench.cluster`` measures it: on the same replicated
  no-op transport, a thread's SDK channel long-polls FERRY_FETCH while the SDK's blocking
  channel sends one 1-record FERRY_PRODUCE at a time; a fetch takes a send's body once both
  slaves acknowledged it (at once when one waits, else parked until the next), and the
  next send waits for the arrival. From each send's start to its arrival.
- ``native_remoting_replicated_single_send_p50_us`` / ``_p99_us``: the replicated single
  send again with the relay and both slaves in C (``bench/native_floor``: blocking
  sockets, one client; built with the C compiler at run time), the SDK's channel asking:
  what is left of that floor with no Python on the server side, the kernel's wake-ups and
  the client's. ``native_relay_...`` has only the relay in C (the slaves Python),
  ``native_slaves_...`` only the slaves: how much of the floor each side's Python is, and
  the floor of a node whose master's path, or whose slaves' path, is native.
- ``page_cache_first_write_us_per_kib`` and ``page_cache_rewrite_us_per_kib``: the CPU
  (user and kernel) of writing 4 GiB in 1 MiB chunks into a new file, then over the same
  bytes again, per KiB of the last GiB of each pass: what putting a byte into the page
  cache costs here once the cache has grown by gigabytes, the first time and after.
  Every node of a group puts each record it stores there once; on a virtual machine that
  returns the guest's free memory to its host, a page the guest had not touched since
  costs a fault in the host too, so the first figure is what a store pays while its page
  cache grows into such memory, and it varies with how recently the memory was freed.
- ``page_cache_recycled_write_us_per_kib``: the same first write of 4 GiB into a new file
  the way a node's CommitLog writes it with a ``commitlog_cache_bytes`` window of 512 MiB:
  synced every 64 MiB, and what lies more than the window behind dropped from the page cache,
  so that each write takes a page freed a moment before: the floor of a store that
  bounds its page cache, measured before the other two (which free gigabytes at the end).

Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time

import grpc

from bench.produce import latencies, produce_requests, send_all, single_requests
from ferrymq.codec.remoting import FrameSplitter, RemotingCommand, decode, encode
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2_grpc
from ferrymq.protocol.ferrymq import data_pb2_grpc

# The checkout: where ``python -c`` finds the packages the server and client scripts import.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The master's end of a replication link in the replicated floors: frames (u32 length,
# payload) go out in order and come back acknowledged in order, one waiter per frame.
SLAVE_LINK = r"""
import asyncio, struct
FRAME_HEAD = struct.Struct(">I")
class SlaveLink:
    def __init__(self, reader, writer):
        self.reader, self.writer, self.waiting = reader, writer, []
    async def read_acks(self):
        while True:
            await self.reader.readexactly(8)
            self.waiting.pop(0).set_result(None)
    def send(self, payload):
        self.writer.write(FRAME_HEAD.pack(len(payload)) + payload)
        acked = asyncio.get_running_loop().create_future()
        self.waiting.append(acked)
        return acked
async def slave_links(ports):
    links = []
    for port in ports:
        link = SlaveLink(*await asyncio.open_connection("127.0.0.1", port))
        asyncio.ensure_future(link.read_acks())
        links.append(link)
    return links
"""

# argv: "aio" or "threads", then the ports of the slaves each Produce is copied to (aio).
SERVER = (
    SLAVE_LINK
    + r"""
import asyncio, struct, sys
from concurrent import futures
import grpc
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc, service_pb2_grpc
from ferrymq.protocol.ferrymq import data_pb2 as data, data_pb2_grpc
OK = pb.Status(code=pb.OK)
ENTRY = rpc.SendResultEntry(status=OK, message_id="x")
ANSWER = rpc.SendMessageResponse(status=OK, entries=[ENTRY])
class AsyncNoop(service_pb2_grpc.MessagingServiceServicer):
    async def SendMessage(self, request, context):
        return ANSWER
class ThreadNoop(service_pb2_grpc.MessagingServiceServicer):
    def SendMessage(self, request, context):
        return ANSWER
class ReplicatingNoop(data_pb2_grpc.DataServicer):
    def __init__(self, links):
        self.links = links
    async def Produce(self, request, context):
        for acked in [link.send(request.records) for link in self.links]:
            await acked
        return data.ProduceResponse(code=pb.OK, offsets=range(request.count))
def run_aio(slave_ports, uvloop_too):
    if uvloop_too:
        import uvloop
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(serve_aio(slave_ports))
    else:
        asyncio.run(serve_aio(slave_ports))
async def serve_aio(slave_ports):
    links = await slave_links(slave_ports)
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 << 20)])
    service_pb2_grpc.add_MessagingServiceServicer_to_server(AsyncNoop(), server)
    data_pb2_grpc.add_DataServicer_to_server(ReplicatingNoop(links), server)
    print(server.add_insecure_port("127.0.0.1:0"), flush=True)
    await server.start()
    await server.wait_for_termination()
if sys.argv[1] in ("aio", "aio-uvloop"):
    run_aio([int(port) for port in sys.argv[2:]], sys.argv[1] == "aio-uvloop")
else:
    server = grpc.server(futures.ThreadPoolExecutor(4))
    service_pb2_grpc.add_MessagingServiceServicer_to_server(ThreadNoop(), server)
    print(server.add_insecure_port("127.0.0.1:0"), flush=True)
    server.start()
    server.wait_for_termination()
"""
)

# Reads frames (u32 length, payload) and acknowledges each with 8 bytes, as a slave acks
# the offset it reached.
# argv: "uvloop" to run on it (the default loop otherwise).
SLAVE = r"""
import asyncio, contextlib, struct, sys
FRAME_HEAD = struct.Struct(">I")
async def follow(reader, writer):
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        while True:
            (length,) = FRAME_HEAD.unpack(await reader.readexactly(4))
            await reader.readexactly(length)
            writer.write(bytes(8))
async def main():
    server = await asyncio.start_server(follow, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
if sys.argv[1:] == ["uvloop"]:
    import uvloop
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
else:
    asyncio.run(main())
"""

# argv: "uvloop" or "asyncio", then the ports of the slaves each FERRY_PRODUCE or
# SEND_MESSAGE_V2 body is copied to. The node's remoting transport with a handler that
# answers every SEND_MESSAGE_V2 and every FERRY_PRODUCE once the slaves (if any)
# acknowledged it. It is a name server too, as a node is, for the official 4.x Java client
# (``bench.java_ceiling``): every topic's route is ``ROUTE_QUEUES`` queues on this server,
# and HEART_BEAT and UNREGISTER_CLIENT are answered SUCCESS.
# A FERRY_FETCH is answered with the body of a FERRY_PRODUCE the slaves acknowledged and no
# fetch took yet: at once when there is one, else parked until the next (a long poll),
# empty after ``FETCH_WAIT_S``; a FERRY_FETCH whose body is ``end`` drops what no fetch took
# and is answered at once (a consumer that starts at the queue's end).
REMOTING_SERVER = (
    SLAVE_LINK
    + r"""
import asyncio, json, sys
from node.remoting.dispatch import Dispatch
from node.remoting.server import RemotingServer
ANSWER = {"msgId": "7F00000100002A9F0000000000000000", "queueId": "0", "queueOffset": "0"}
FETCH_WAIT_S = 1.0
ROUTE_QUEUES = 8
LINKS = []
UNFETCHED = []
PARKED = []
ROUTE = []
async def relayed(body):
    for acked in [link.send(body) for link in LINKS]:
        await acked
async def noop(request, connection):
    await relayed(request.body)
    return request.reply(0, ext_fields=ANSWER)
async def success(request, connection):
    return request.reply(0)
async def route(request, connection):
    return request.reply(0, body=ROUTE[0])
def route_body(port):
    broker = {"brokerAddrs": {"0": f"127.0.0.1:{port}"}, "brokerName": "noop", "cluster": "noop"}
    queues = {"brokerName": "noop", "perm": 6, "readQueueNums": ROUTE_QUEUES,
              "topicSysFlag": 0, "writeQueueNums": ROUTE_QUEUES}
    route = {"brokerDatas": [broker], "filterServerTable": {}, "queueDatas": [queues]}
    return json.dumps(route, separators=(",", ":")).encode()
async def produced(request, connection):
    await relayed(request.body)
    while PARKED and PARKED[0].done():
        PARKED.pop(0)
    if PARKED:
        PARKED.pop(0).set_result(request.body)
    else:
        UNFETCHED.append(request.body)
    return request.reply(0, body=b"")
async def fetch(request, connection):
    if bytes(request.body) == b"end":
        UNFETCHED.clear()
        return request.reply(0, body=b"")
    if UNFETCHED:
        return request.reply(0, body=UNFETCHED.pop(0))
    loop = asyncio.get_running_loop()
    parked = loop.create_future()
    PARKED.append(parked)
    loop.call_later(FETCH_WAIT_S, lambda: parked.done() or parked.set_result(b""))
    return request.reply(0, body=await parked)
async def main():
    LINKS.extend(await slave_links([int(port) for port in sys.argv[2:]]))
    dispatch = Dispatch()
    dispatch.register(310, noop)
    dispatch.register(30001, produced)
    dispatch.register(30002, fetch)
    dispatch.register(105, route)
    dispatch.register(34, success)
    dispatch.register(35, success)
    server = RemotingServer(dispatch)
    port = await server.bind("127.0.0.1", 0)
    ROUTE.append(route_body(port))
    await server.serve()  # bind alone does not listen yet: the port is told once it does
    print(port, flush=True)
    await asyncio.Event().wait()
if sys.argv[1] == "uvloop":
    import uvloop
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
else:
    asyncio.run(main())
"""
)

# Echoes the first 16 bytes of every read back: the operating system's round trip between
# two processes, with no event loop and no framing.
ECHO = r"""
import socket
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
connection, _ = server.accept()
connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while data := connection.recv(65536):
    connection.sendall(data[:16])
"""

BATCH_IN_FLIGHT = 16
WARM_UP_SENDS = 200  # sent one at a time before the ones timed
BATCH_RECORDS = 128


@contextlib.contextmanager
def process(script: str, *args: str, cpus: set[int] | None = None):
    """A helper process whose first line of output is the port it serves on (on ``cpus``
    only, when given): its port."""
    with served(script, *args, cpus=cpus) as (port, _):
        yield port


@contextlib.contextmanager
def served(script: str, *args: str, cpus: set[int] | None = None):
    """``process``, yielding (port, pid): for a caller that measures its CPU."""
    with running([sys.executable, "-c", script, *args], cpus) as served_at:
        yield served_at


@contextlib.contextmanager
def running(argv: list[str], cpus: set[int] | None = None):
    """A helper program whose first line of output is its port: (port, pid)."""
    child = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )
    try:
        line = child.stdout.readline()
        if not line:
            raise RuntimeError("a benchmark server did not start")
        yield int(line), child.pid
    finally:
        child.kill()
        child.wait()


# ---- the native floor: the replicated relay and its slaves in C ------------------------
NATIVE_FLOOR = os.path.join(ROOT, "bench", "native_floor")


@contextlib.contextmanager
def native_floor_programs():
    """``bench/native_floor``'s relay and slave, built with the C compiler that builds
    the node's extensions (``CC``, else Python's, else ``cc``), in a directory that goes
    when the block ends: {"relay": path, "slave": path}."""
    compiler = os.environ.get("CC") or (sysconfig.get_config_var("CC") or "cc").split()[0]
    with tempfile.TemporaryDirectory(prefix="ferrymq-native-floor-") as directory:
        built = {}
        for name in ("relay", "slave"):
            built[name] = os.path.join(directory, name)
            source = os.path.join(NATIVE_FLOOR, f"{name}.c")
            subprocess.run([compiler, "-O2", "-o", built[name], source], check=True)
        yield built


@contextlib.contextmanager
def replicated_relay(relay: str, slaves: str, programs: dict[str, str] | None = None):
    """The replicated floor's three processes, each ``"python"`` (REMOTING_SERVER and SLAVE
    on uvloop) or ``"native"`` (``programs``, from ``native_floor_programs``): the relay's
    port, its pid and the slaves' pids."""

    def slave():
        if slaves == "native":
            return running([programs["slave"]])
        return served(SLAVE, "uvloop")

    with slave() as (first, first_pid), slave() as (second, second_pid):
        if relay == "native":
            helper = running([programs["relay"], str(first), str(second)])
        else:
            helper = served(REMOTING_SERVER, "uvloop", str(first), str(second))
        with helper as (port, pid):
            yield port, pid, [first_pid, second_pid]


def native_single_sends(singles: int) -> dict:
    """The replicated single send with the relay, the slaves or both in C (the SDK's
    channel asking, as for ``noop_remoting_replicated_single_send``): how much of that
    floor is Python in the relay and in the slaves, and what is left with none (the
    kernel's wake-ups and the client's)."""
    figures = {}
    with native_floor_programs() as programs:
        for relay, slaves, name in (
            ("native", "native", "native_remoting_replicated_single_send"),
            ("native", "python", "native_relay_remoting_replicated_single_send"),
            ("python", "native", "native_slaves_remoting_replicated_single_send"),
        ):
            with replicated_relay(relay, slaves, programs) as (port, _, _):
                took = sdk_remoting_one_at_a_time(f"127.0.0.1:{port}", 30001, singles * 2)
            figures[f"{name}_p50_us"], figures[f"{name}_p99_us"] = p50_p99_us(took)
    return figures


def p50_p99_us(took: list[float]) -> tuple[int, int]:
    took = sorted(took)
    return round(statistics.median(took) * 1e6), round(took[int(len(took) * 0.99)] * 1e6)


async def drive(port: int, count: int, in_flight: int) -> float:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        return count / await send_all(stub, single_requests(count, 0), in_flight)


async def one_at_a_time(port: int, count: int) -> list[float]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        requests = single_requests(count + WARM_UP_SENDS, 0)
        await latencies(stub, requests[:WARM_UP_SENDS])  # warm up
        return await latencies(stub, requests[WARM_UP_SENDS:])


def produce_one_at_a_time(port: int, count: int) -> list[float]:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = data_pb2_grpc.DataStub(channel)
        requests = produce_requests(count + WARM_UP_SENDS, 1, 0)
        for request in requests[:WARM_UP_SENDS]:
            stub.Produce(request)
        took = []
        for request in requests[WARM_UP_SENDS:]:
            started = time.perf_counter()
            stub.Produce(request)
            took.append(time.perf_counter() - started)
        return took


async def produce_batches(port: int, seconds: float) -> float:
    options = [("grpc.max_send_message_length", 64 << 20)]
    requests = produce_requests(BATCH_IN_FLIGHT * 4, BATCH_RECORDS, 0)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        stub = data_pb2_grpc.DataStub(channel)
        for request in requests[:BATCH_IN_FLIGHT]:  # warm up
            await stub.Produce(request)
        sent = 0
        deadline = time.perf_counter() + seconds

        async def worker(first: int) -> None:
            nonlocal sent
            index = first
            while time.perf_counter() < deadline:
                await stub.Produce(requests[index % len(requests)])
                sent += BATCH_RECORDS
                index += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker(k) for k in range(BATCH_IN_FLIGHT)))
        return sent / (time.perf_counter() - started)


async def remoting_produce_batches(port: int, seconds: float) -> float:
    """FERRY_PRODUCE frames of ``BATCH_RECORDS`` records, ``BATCH_IN_FLIGHT`` in flight on
    one connection (as the SDK's asyncio producer keeps them), built before the clock."""
    bodies = [r.SerializeToString() for r in produce_requests(BATCH_IN_FLIGHT, BATCH_RECORDS, 0)]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    splitter = FrameSplitter()
    waiting: dict[int, asyncio.Future] = {}

    async def read_answers() -> None:
        while True:
            for frame in splitter.feed(await reader.read(1 << 20)):
                waiting.pop(decode(frame).opaque).set_result(None)

    reading = asyncio.ensure_future(read_answers())
    sent = 0
    opaques = iter(range(1, 1 << 62))

    async def call(body: bytes) -> None:
        opaque = next(opaques)
        waiting[opaque] = asyncio.get_running_loop().create_future()
        writer.write(encode(RemotingCommand(30001, opaque=opaque, body=body)))
        await waiting[opaque]

    for body in bodies:  # warm up
        await call(body)
    deadline = time.perf_counter() + seconds

    async def worker(body: bytes) -> None:
        nonlocal sent
        while time.perf_counter() < deadline:
            await call(body)
            sent += BATCH_RECORDS

    started = time.perf_counter()
    await asyncio.gather(*(worker(body) for body in bodies))
    took = time.perf_counter() - started
    reading.cancel()
    writer.close()
    return sent / took


def echo_round_trips(count: int, same_cpu: bool) -> list[float]:
    """1 KiB written to the ECHO process and 16 bytes read back, one at a time, from a
    blocking socket; with ``same_cpu`` both processes run on the first CPU only."""
    import socket

    cpus = {min(os.sched_getaffinity(0))} if same_cpu else None
    mine = os.sched_getaffinity(0)
    payload = bytes(1024)
    took = []
    with process(ECHO, cpus=cpus) as port:
        try:
            if cpus:
                os.sched_setaffinity(0, cpus)
            with socket.create_connection(("127.0.0.1", port)) as connection:
                connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for index in range(count + WARM_UP_SENDS):
                    started = time.perf_counter()
                    connection.sendall(payload)
                    connection.recv(65536)
                    if index >= WARM_UP_SENDS:
                        took.append(time.perf_counter() - started)
        finally:
            os.sched_setaffinity(0, mine)
    return took


def remoting_one_at_a_time(port: int, count: int) -> list[float]:
    """1 KiB SEND_MESSAGE_V2 frames, one at a time through a blocking socket."""
    import socket

    fields = {"a": "bench", "b": "noop", "e": "0", "f": "0", "g": "0", "i": "UNIQ_KEY\x01x"}
    frames = [
        encode(RemotingCommand(310, opaque=i, ext_fields=fields, body=bytes(1024)))
        for i in range(count + WARM_UP_SENDS)
    ]
    splitter = FrameSplitter()
    took = []
    with socket.create_connection(("127.0.0.1", port)) as connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for index, frame in enumerate(frames):
            started = time.perf_counter()
            connection.sendall(frame)
            answers: list[bytes] = []
            while not answers:
                answers = splitter.feed(connection.recv(65536))
            decode(answers[0])
            if index >= WARM_UP_SENDS:
                took.append(time.perf_counter() - started)
    return took


def sdk_remoting_one_at_a_time(address: str, code: int, count: int) -> list[float]:
    """The SDK's blocking channel: ``code`` with a 1-record ProduceRequest body, one at a
    time; an answer other than SUCCESS counts like one (it is the round trip measured)."""
    from ferrymq.client.errors import FerryError
    from ferrymq.client.remoting_channel import RemotingChannel

    requests = produce_requests(count + WARM_UP_SENDS, 1, 0)
    channel = RemotingChannel(address, 10.0)
    took = []
    try:
        for index, request in enumerate(requests):
            started = time.perf_counter()
            try:
                channel.call(code, request.SerializeToString())
            except FerryError as error:
                if error.code_name != "UNAVAILABLE" or "NOT_SUPPORTED" not in error.detail:
                    raise
            if index >= WARM_UP_SENDS:
                took.append(time.perf_counter() - started)
    finally:
        channel.close()
    return took


def sdk_remoting_end_to_end(address: str, count: int) -> list[float]:
    """``bench.cluster``'s end to end on the no-op replicated transport: the SDK's
    blocking channel sends one 1-record FERRY_PRODUCE at a time while a thread's channel
    long-polls FERRY_FETCH; each send's age is taken when the fetch brings it, and the next
    send waits for that. Seconds from each send's start to its arrival."""
    from ferrymq.client.remoting_channel import RemotingChannel

    requests = produce_requests(count + WARM_UP_SENDS, 1, 0)
    arrived: list[float] = []
    got = threading.Condition()
    stop = threading.Event()
    ready = threading.Event()

    def consume() -> None:
        channel = RemotingChannel(address, 10.0)
        try:
            channel.call(30002, b"end")
            ready.set()
            while not stop.is_set():
                if channel.call(30002).body:
                    with got:
                        arrived.append(time.perf_counter())
                        got.notify()
        finally:
            channel.close()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    producer = RemotingChannel(address, 10.0)
    took = []
    try:
        if not ready.wait(10):
            raise RuntimeError("the end-to-end floor's consumer did not start")
        for index, request in enumerate(requests):
            body = request.SerializeToString()
            started = time.perf_counter()
            producer.call(30001, body)
            with got:
                if not got.wait_for(lambda index=index: len(arrived) > index, 10):
                    raise RuntimeError("the end-to-end floor's consumer timed out")
            if index >= WARM_UP_SENDS:
                took.append(arrived[index] - started)
    finally:
        stop.set()
        producer.close()
        consumer.join(5)
    return took


@contextlib.contextmanager
def node_remoting_address():
    """One node process (the real one, on uvloop) in a temporary directory: its remoting
    address."""
    import shutil
    import tempfile

    from ferrymq.launcher.node_process import start_node_process

    directory = tempfile.mkdtemp(prefix="ferrymq-floor-")
    node = start_node_process(os.path.join(directory, "node"))
    try:
        yield node.remoting
    finally:
        node.sigkill()
        shutil.rmtree(directory, ignore_errors=True)


def page_cache_write_us_per_kib(mib: int) -> tuple[float, float]:
    """CPU µs per KiB of the last GiB (or all, when less) of writing ``mib`` MiB into a
    new file, then of writing over the same bytes again."""
    chunk = bytes(1 << 20)
    last = min(mib, 1024)
    took = []
    with tempfile.TemporaryDirectory(prefix="ferrymq-floor-", dir=ROOT) as directory:
        fd = os.open(os.path.join(directory, "pages"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            for _ in range(2):
                for index in range(mib):
                    if index == mib - last:
                        started = time.process_time()
                    os.pwrite(fd, chunk, index << 20)
                spent = time.process_time() - started
                took.append(round(spent / (last * 1024) * 1e6, 3))
        finally:
            os.close(fd)
    return took[0], took[1]


def page_cache_recycled_write_us_per_kib(mib: int) -> float:
    """CPU µs per KiB of the last GiB (or all) of writing ``mib`` MiB into a new file as a
    node's CommitLog writes with ``commitlog_cache_bytes = RECYCLED_WINDOW_MIB`` MiB:
    every 64 MiB the file is synced and what lies more than that window behind is dropped
    from the page cache, so that later writes take pages freed a moment before."""
    chunk = bytes(1 << 20)
    window = RECYCLED_WINDOW_MIB
    last = min(mib, 1024)
    dropped = 0
    with tempfile.TemporaryDirectory(prefix="ferrymq-floor-", dir=ROOT) as directory:
        fd = os.open(os.path.join(directory, "pages"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            for index in range(mib):
                if index == mib - last:
                    started = time.process_time()
                os.pwrite(fd, chunk, index << 20)
                if index % 64 == 63:
                    os.fdatasync(fd)
                    behind = index + 1 - window
                    if behind > dropped:
                        length = (behind - dropped) << 20
                        os.posix_fadvise(fd, dropped << 20, length, os.POSIX_FADV_DONTNEED)
                        dropped = behind
            spent = time.process_time() - started
        finally:
            os.close(fd)
    return round(spent / (last * 1024) * 1e6, 3)


UNSERVED_CODE = 30099  # in ferrymq's private range, served by nobody

SCALES = {  # RPCs at 256 in flight, sends one at a time, seconds of batches
    "full": (40_000, 5_000, 10.0),
    "quick": (10_000, 1_500, 3.0),
    "smoke": (1_000, 100, 0.5),
}
PAGE_CACHE_MIB = {"full": 4096, "quick": 4096, "smoke": 64}
# The window of ``page_cache_recycled_write_us_per_kib`` (a node's ``commitlog_cache_bytes``
# set to it; its default, 0, leaves the page cache to the kernel).
RECYCLED_WINDOW_MIB = 512


def measure(scale: str) -> dict:
    count, singles, batch_s = SCALES[scale]
    figures = {}
    for same_cpu, name in ((False, "os_round_trip"), (True, "os_round_trip_same_cpu")):
        p50, p99 = p50_p99_us(echo_round_trips(singles * 2, same_cpu))
        figures[f"{name}_p50_us"], figures[f"{name}_p99_us"] = p50, p99
    for kind in ("aio", "threads"):
        with process(SERVER, kind) as port:
            asyncio.run(drive(port, min(count, 2000), 64))  # warm up
            figures[f"noop_{kind}_server_256_inflight_rpcs_per_s"] = round(
                asyncio.run(drive(port, count, 256))
            )
            if kind == "aio":
                took = asyncio.run(one_at_a_time(port, singles))
                figures["noop_single_send_p50_us"], figures["noop_single_send_p99_us"] = p50_p99_us(
                    took
                )
                p50, p99 = p50_p99_us(produce_one_at_a_time(port, singles))
                figures["noop_produce_single_send_p50_us"] = p50
                figures["noop_produce_single_send_p99_us"] = p99
    with process(SERVER, "aio-uvloop") as port:
        asyncio.run(drive(port, min(count, 2000), 64))  # warm up
        p50, p99 = p50_p99_us(asyncio.run(one_at_a_time(port, singles)))
        figures["noop_uvloop_single_send_p50_us"] = p50
        figures["noop_uvloop_single_send_p99_us"] = p99
    for loop in ("uvloop", "asyncio"):
        with process(REMOTING_SERVER, loop) as port:
            p50, p99 = p50_p99_us(remoting_one_at_a_time(port, singles * 2))
            figures[f"noop_remoting_{loop}_p50_us"] = p50
            figures[f"noop_remoting_{loop}_p99_us"] = p99
            if loop == "uvloop":
                took = sdk_remoting_one_at_a_time(f"127.0.0.1:{port}", 30001, singles * 2)
                p50, p99 = p50_p99_us(took)
                figures["noop_sdk_remoting_produce_p50_us"] = p50
                figures["noop_sdk_remoting_produce_p99_us"] = p99
    with node_remoting_address() as address:
        p50, p99 = p50_p99_us(sdk_remoting_one_at_a_time(address, UNSERVED_CODE, singles * 2))
        figures["node_remoting_noop_p50_us"] = p50
        figures["node_remoting_noop_p99_us"] = p99
    with (
        process(SLAVE) as first,
        process(SLAVE) as second,
        process(SERVER, "aio", str(first), str(second)) as port,
    ):
        p50, p99 = p50_p99_us(produce_one_at_a_time(port, singles))
        figures["noop_replicated_single_send_p50_us"] = p50
        figures["noop_replicated_single_send_p99_us"] = p99
        figures["noop_replicated_batch_msgs_per_s"] = round(
            asyncio.run(produce_batches(port, batch_s))
        )
    with replicated_relay("python", "python") as (port, _, _):
        took = sdk_remoting_one_at_a_time(f"127.0.0.1:{port}", 30001, singles * 2)
        p50, p99 = p50_p99_us(took)
        figures["noop_remoting_replicated_single_send_p50_us"] = p50
        figures["noop_remoting_replicated_single_send_p99_us"] = p99
        p50, p99 = p50_p99_us(sdk_remoting_end_to_end(f"127.0.0.1:{port}", singles * 2))
        figures["noop_remoting_replicated_end_to_end_p50_us"] = p50
        figures["noop_remoting_replicated_end_to_end_p99_us"] = p99
        figures["noop_remoting_replicated_batch_msgs_per_s"] = round(
            asyncio.run(remoting_produce_batches(port, batch_s))
        )
    figures.update(native_single_sends(singles))
    # Recycled first: the first-write pass frees gigabytes when it ends, which a pass
    # right after it would take instead of its own dropped pages.
    recycled = page_cache_recycled_write_us_per_kib(PAGE_CACHE_MIB[scale])
    figures["page_cache_recycled_write_us_per_kib"] = recycled
    first, again = page_cache_write_us_per_kib(PAGE_CACHE_MIB[scale])
    figures["page_cache_first_write_us_per_kib"] = first
    figures["page_cache_rewrite_us_per_kib"] = again
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--smoke", action="store_true", help="seconds: proves it runs")
    args = parser.parse_args()
    figures = measure("smoke" if args.smoke else "quick" if args.quick else "full")
    if not args.json:
        for name, value in figures.items():
            print(f"{name:45} {value}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
