"""A transaction service over a real store with an injected clock, shared by the
transaction tests and the orphan-check relay's tests."""

from __future__ import annotations

import asyncio

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.grpc.messaging import check_command
from node.grpc.telemetry_outbox import TelemetryOutbox
from node.rpc_status import InvalidRequest
from node.services.caller import Caller, Door
from node.services.permissions import Permissions
from node.services.transactions import OP_TOPIC, EndRequest, TransactionService
from store.config import StoreConfig
from store.message import Message
from store.message_store import MessageStore

T0 = 1_800_000_000_000
STORE = dict(
    commitlog_segment_bytes=8 * 1024 * 1024,
    consume_queue_entries_per_file=10_000,
    index_slot_count=1009,
    index_entry_count=40_000,
)
CHECK_MS = 5_000
PRODUCER = Caller(Door.MESSAGING, "Telemetry", None)


class Transactions:
    def __init__(self, tmp_path) -> None:
        self.tmp_path = tmp_path
        self.loop = asyncio.new_event_loop()
        self.now = T0
        self.open()

    def open(self) -> None:
        config = StoreConfig(str(self.tmp_path / "data"), **STORE)
        self.store = MessageStore.open(config, clock_ms=lambda: self.now)
        self.service = TransactionService(
            self.store, CHECK_MS, 3, Permissions(False), clock_ms=lambda: self.now
        )
        self.service.load()
        self.outbox = TelemetryOutbox()
        self.service.targets.register(
            self.outbox,
            PRODUCER,
            lambda _, half: self.outbox.offer(check_command(half)),
            topics=["orders"],
        )

    def crash_and_reopen(self) -> None:
        self.store.close_abruptly_for_tests()
        self.open()

    def send(self, body: bytes) -> str:
        half, transaction_id = TransactionService.half_of(Message.build("orders", body))
        result = self.store.put_messages([half])
        assert result.ok
        self.service.sent(transaction_id, "orders", result.appended[0].queue_offset)
        return transaction_id

    def end(
        self, transaction_id: str, resolution, topic: str = "orders", source=pb.SOURCE_CLIENT
    ) -> int:
        request = EndRequest(transaction_id, resolution, source=source, topic=topic)
        try:
            answer = self.loop.run_until_complete(self.service.end(PRODUCER, request))
        except InvalidRequest as error:
            return error.code
        return answer.code

    def check(self) -> int:
        return self.loop.run_until_complete(self.service.check_orphans())

    def visible(self) -> list[bytes]:
        return [m.body for m in self.store.get_messages("orders", 0, 0, 1000).messages]

    def ops(self) -> list[dict[str, str]]:
        return [m.properties for m in self.store.get_messages(OP_TOPIC, 0, 0, 1000).messages]
