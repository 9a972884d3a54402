"""The client port's bounds (issue 25): a SendMessage's message count and bytes, checked
before any message is converted; concurrent calls; a Telemetry stream whose client does
not read; and the producer registry of orphan checks, which forgets ended streams."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from types import SimpleNamespace

import grpc
import pytest

from ferrymq.codec.headers import PINNED_QUEUE
from ferrymq.codec.properties import PROPERTY_TRANSACTION_ID
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from ferrymq.protocol.ferrymq import admin_pb2 as api
from node.grpc.messaging import MessagingService
from node.grpc.telemetry_outbox import OUTBOX_MAX, TelemetryOutbox
from node.services.caller import Caller, Door
from node.services.direct_consume import DirectConsumers
from node.services.permissions import Permissions
from node.services.send import SEND_MESSAGES_MAX
from node.services.transactions import HALF_TOPIC, TOPICS_PER_PRODUCER_MAX, CheckTargets
from tests.support.rpc import create_topic, message, queue_of, stubs

BATCH_LIMIT = 65_536
CONCURRENT_RPCS = 4
NODE_TOML = f"""max_batch_bytes = {BATCH_LIMIT}
[messages]
max_concurrent_rpcs = {CONCURRENT_RPCS}
"""


@pytest.fixture(scope="module")
def limited_node(module_nodes):
    """A node with the limits above, topic ``orders`` and group ``G``: the node and its
    messaging stub."""
    started = module_nodes(NODE_TOML)
    channel, messaging, admin = stubs(started.address)
    create_topic(admin, "orders", queues=1)
    answer = admin.CreateGroup(api.CreateGroupRequest(group=api.Group(name="G")))
    assert answer.status.code == 0, answer.status  # the Admin service's OK
    yield started, messaging
    channel.close()


def stored(messaging) -> int:
    request = rpc.QueryOffsetRequest(
        message_queue=queue_of("orders", 0), query_offset_policy=pb.END
    )
    return messaging.QueryOffset(request).offset


def test_a_send_of_too_many_messages_is_refused_whole(limited_node):
    _, messaging = limited_node
    before = stored(messaging)
    messages = [message("orders", b"x", f"M{i}") for i in range(SEND_MESSAGES_MAX + 1)]
    answer = messaging.SendMessage(rpc.SendMessageRequest(messages=messages))
    assert answer.status.code == pb.BAD_REQUEST
    assert f"{SEND_MESSAGES_MAX + 1} messages in one request" in answer.status.message
    assert f"the limit is {SEND_MESSAGES_MAX}" in answer.status.message
    assert stored(messaging) == before


def test_a_send_whose_bodies_pass_the_batch_limit_is_refused_before_conversion(limited_node):
    _, messaging = limited_node
    before = stored(messaging)
    half = b"y" * (BATCH_LIMIT // 2 + 1)
    # The empty body would be refused while converting: the byte check comes first.
    messages = [message("orders", half, "B1"), message("orders", half, "B2")]
    messages.append(message("orders", b"", "B3"))
    answer = messaging.SendMessage(rpc.SendMessageRequest(messages=messages))
    assert answer.status.code == pb.PAYLOAD_TOO_LARGE, answer.status
    assert f"the limit of a request is {BATCH_LIMIT}" in answer.status.message
    assert [e.status.code for e in answer.entries] == [pb.PAYLOAD_TOO_LARGE] * 3
    assert stored(messaging) == before


def test_calls_beyond_the_concurrency_limit_are_refused_until_some_end(limited_node):
    _, messaging = limited_node
    # Whatever the group could receive is taken first, so every poll below waits.
    drain = rpc.ReceiveMessageRequest(
        group=pb.Resource(name="G"), message_queue=queue_of("orders", 0), batch_size=32
    )
    drain.long_polling_timeout.seconds = 0
    list(messaging.ReceiveMessage(drain, timeout=10))
    poll = rpc.ReceiveMessageRequest(
        group=pb.Resource(name="G"), message_queue=queue_of("orders", 0), batch_size=1
    )
    poll.long_polling_timeout.seconds = 30
    polls = [messaging.ReceiveMessage(poll, timeout=40) for _ in range(CONCURRENT_RPCS + 2)]
    try:
        deadline = time.monotonic() + 10
        # A refused call ends at once; an accepted poll waits its 30 s.
        while sum(p.done() for p in polls) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        refused = [p for p in polls if p.done()]
        assert len(refused) >= 2, "no call was refused beyond the limit"
        assert {p.code() for p in refused} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert sum(not p.done() for p in polls) <= CONCURRENT_RPCS
    finally:
        for p in polls:
            p.cancel()
    deadline = time.monotonic() + 10
    while True:  # the slots come back as the cancelled polls end
        try:
            route = messaging.QueryRoute(rpc.QueryRouteRequest(topic=pb.Resource(name="orders")))
            break
        except grpc.RpcError as error:
            assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert time.monotonic() < deadline, "slots not freed after the polls ended"
    assert route.status.code == pb.OK


SENDS_AT_ONCE = 2048  # the official client's window in bench.peers' batched send


def test_thousands_of_sends_arriving_at_once_are_all_answered_and_stored(node):
    """gRPC's core cancelled the calls queued past 1,000 before the server took them
    (``node.server.grpc_server_options``): each must be answered, and stored."""
    channel, _, admin = stubs(node.address)
    create_topic(admin, "burst", queues=1)
    before = stored_in(node.address, "burst")
    channel.close()

    async def send_all() -> list[str]:
        async with grpc.aio.insecure_channel(node.address) as aio_channel:
            send = aio_channel.unary_unary(
                "/apache.rocketmq.v2.MessagingService/SendMessage",
                request_serializer=rpc.SendMessageRequest.SerializeToString,
                response_deserializer=rpc.SendMessageResponse.FromString,
            )

            async def one(i: int) -> str:
                request = rpc.SendMessageRequest(messages=[message("burst", b"b" * 1024, f"M{i}")])
                try:
                    answer = await send(request, metadata=[PINNED_QUEUE], timeout=60)
                except grpc.aio.AioRpcError as error:
                    return error.code().name
                return pb.Code.Name(answer.status.code)

            return await asyncio.gather(*(one(i) for i in range(SENDS_AT_ONCE)))

    answers = asyncio.run(send_all())
    assert Counter(answers) == {"OK": SENDS_AT_ONCE}
    assert stored_in(node.address, "burst") == before + SENDS_AT_ONCE


def stored_in(address: str, topic: str) -> int:
    channel, messaging, _ = stubs(address)
    try:
        request = rpc.QueryOffsetRequest(
            message_queue=queue_of(topic, 0), query_offset_policy=pb.END
        )
        return messaging.QueryOffset(request).offset
    finally:
        channel.close()


# ---- in-process: Telemetry and the orphan-check registry -------------------------------
PRODUCER = Caller(Door.MESSAGING, "Telemetry", None)


class Aborted(Exception):
    pass


class Context:
    def __init__(self) -> None:
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise Aborted(details)

    def peer(self) -> str:
        return "ipv4:10.0.0.1:40000"


def settings_command(topics: list[str]) -> rpc.TelemetryCommand:
    publishing = pb.Publishing(topics=[pb.Resource(name=t) for t in topics])
    return rpc.TelemetryCommand(
        settings=pb.Settings(client_type=pb.PRODUCER, publishing=publishing)
    )


def telemetry_service() -> tuple[MessagingService, CheckTargets]:
    targets = CheckTargets(Permissions(enabled=False))
    services = SimpleNamespace(
        transactions=SimpleNamespace(targets=targets),
        direct_consume=SimpleNamespace(consumers=DirectConsumers()),
    )
    return MessagingService(services, 1024), targets


def test_a_telemetry_client_that_does_not_read_is_cut_off_with_a_bounded_outbox():
    service, targets = telemetry_service()
    context = Context()
    written = OUTBOX_MAX * 3

    async def commands():
        for _ in range(written):
            yield settings_command(["orders"])

    async def run() -> int:
        stream = service.Telemetry(commands(), context)
        answers = [await stream.__anext__()]  # the reader has run ahead meanwhile
        with pytest.raises(Aborted):
            async for answer in stream:
                answers.append(answer)
        return len(answers)

    answered = asyncio.run(asyncio.wait_for(run(), 10))
    assert answered == OUTBOX_MAX  # what the outbox held, then the end
    code, details = context.aborted
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED and "does not read" in details
    assert not targets.registered  # the ended stream left the registry


def test_ended_producer_streams_leave_the_registry_and_full_outboxes_are_passed_over():
    # What the registry reads of a stored half: its real topic and producer group.
    half = SimpleNamespace(
        topic=HALF_TOPIC, properties={"REAL_TOPIC": "orders", PROPERTY_TRANSACTION_ID: "T"}
    )

    async def run() -> None:
        registry = CheckTargets(Permissions(enabled=False))
        slow, quick = TelemetryOutbox(limit=1), TelemetryOutbox(limit=1)
        check = rpc.TelemetryCommand(status=pb.Status(code=pb.OK))
        for outbox, topics in ((slow, ["orders"]), (quick, ["orders", "payments"])):
            registry.register(
                outbox, PRODUCER, lambda _, __, o=outbox: o.offer(check), topics=topics
            )
        assert registry.offer("T", half) and registry.offer("T", half)
        assert not registry.offer("T", half)  # both full: the check waits its turn
        await slow.next()
        assert registry.offer("T", half)  # the one with room takes it
        registry.unregister(slow)
        registry.unregister(quick)
        assert not registry.registered

    asyncio.run(run())


def test_a_producer_naming_too_many_topics_is_refused_and_not_registered():
    service, targets = telemetry_service()

    async def commands():
        yield settings_command([f"t{i}" for i in range(TOPICS_PER_PRODUCER_MAX + 1)])

    async def run() -> tuple[rpc.TelemetryCommand, bool]:
        stream = service.Telemetry(commands(), Context())
        first = await stream.__anext__()
        registered = targets.registered
        await stream.aclose()
        return first, registered

    answer, registered = asyncio.run(run())
    assert answer.status.code == pb.BAD_REQUEST
    assert f"the limit is {TOPICS_PER_PRODUCER_MAX}" in answer.status.message
    assert not registered
