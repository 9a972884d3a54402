"""Reading one queue's offset range on an executor: the unit of work of every Spark
partition, batch or streaming.

A range ``[start, end)`` of one queue is deterministic (the queue is append-only and
offsets are dense), so a micro-batch that Spark runs again after a crash reads exactly the
same messages. Fetches follow the queue: a transport failure or a node that no longer
serves it makes the reader ask routing again and retry there, until ``retry_timeout_ms``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from ferrymq.client.errors import TRANSPORT, FerryError
from ferrymq.client.remoting_channel import FetchAnswer, RemotingChannel, fetch_answer
from ferrymq.codec.remoting_codes import FerryRequestCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.ferrymq import data_pb2 as data
from ferrymq.spark import topology
from ferrymq.spark.records import decode_batch

FETCH_BYTES = 8 << 20
# Codes after which another node may serve the queue: ask routing again.
RELOCATE_CODES = frozenset(
    {pb.TOPIC_NOT_FOUND, pb.FORBIDDEN, pb.INTERNAL_SERVER_ERROR, pb.HA_NOT_AVAILABLE}
)


class DataLoss(RuntimeError):
    """Offsets the query must read are no longer (or not yet) stored."""


@dataclass(frozen=True)
class QueueRange:
    """One Spark partition: plain data only (it is pickled to executors)."""

    endpoints: tuple[str, ...]
    group: str
    topic: str
    queue_id: int
    start: int
    end: int
    address: str
    broker_group: str
    fail_on_data_loss: bool
    retry_timeout_ms: int
    fetch_messages: int
    # A queue that appeared after the query started begins at its earliest offset; what
    # retention removed before the query saw it is not a loss.
    new_queue: bool = False


class _Fetcher:
    """Blocking fetches of one queue from one address, on its remoting port when it has
    one (``topology.remoting_address``). (Keeping a request in flight ahead through a gRPC
    future was tried: it cost 40% more client CPU per message than it saved in waiting,
    on two cores.)"""

    def __init__(self, part: QueueRange, address: str) -> None:
        self.part = part
        self.address = address
        self.conn = topology.connection(address)
        self.channel: RemotingChannel | None = None
        with contextlib.suppress(FerryError):  # ClusterStatus unanswered: gRPC
            remoting = topology.remoting_address(address)
            if remoting is not None:
                self.channel = RemotingChannel(remoting, self.conn.timeout_s, self.conn.security)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()

    def answer(self, offset: int) -> data.FetchResponse | FetchAnswer:
        part = self.part
        request = data.FetchRequest(
            group=part.group,
            topic=part.topic,
            queue_id=part.queue_id,
            offset=offset,
            max_messages=min(part.fetch_messages, part.end - offset),
            max_bytes=FETCH_BYTES,
        )
        if self.channel is not None:
            raw = self.channel.call(FerryRequestCode.FERRY_FETCH, request.SerializeToString())
            return fetch_answer(raw)
        return self.conn.call(self.conn.data.Fetch, request)


def read_range(part: QueueRange) -> Iterator[pa.RecordBatch]:
    offset = part.start
    fetcher = _Fetcher(part, part.address)
    deadline = time.monotonic() + part.retry_timeout_ms / 1000
    attempt = 0
    where = f"{part.topic}/{part.queue_id}"

    def retry(reason: str) -> None:
        nonlocal fetcher, attempt
        if time.monotonic() >= deadline:
            raise DataLoss(
                f"{where}: cannot read offsets [{offset}, {part.end}) within "
                f"{part.retry_timeout_ms} ms: {reason}"
            )
        time.sleep(topology.backoff(attempt))
        attempt += 1
        # Routing may be unreachable too: then the old address is tried again.
        address = fetcher.address
        with contextlib.suppress(FerryError):
            remaining_ms = max(1, int((deadline - time.monotonic()) * 1000))
            address = topology.locate(
                part.endpoints, part.topic, part.broker_group, part.queue_id, remaining_ms
            )
        # A new fetcher even on the same address: its remoting port may have changed.
        fetcher.close()
        fetcher = _Fetcher(part, address)

    try:
        while offset < part.end:
            try:
                answer = fetcher.answer(offset)
            except FerryError as error:
                if error.code == TRANSPORT:  # a restarted node may listen elsewhere now
                    topology.forget_remoting(fetcher.address)
                retry(f"{fetcher.address}: {error}")
                continue
            if answer.code == pb.OK:
                batch, next_offset = decode_batch(
                    answer.records, part.topic, part.queue_id, part.end, part.broker_group
                )
                if batch.num_rows:
                    first = batch.column(2)[0].as_py()
                    if first != offset and not _may_skip(part, offset, answer):
                        raise DataLoss(f"{where}: expected offset {offset}, got {first}")
                    offset = next_offset
                    yield batch
                else:
                    offset = max(offset + 1, answer.next_offset)
                attempt = 0
                deadline = time.monotonic() + part.retry_timeout_ms / 1000
            elif answer.code == pb.ILLEGAL_OFFSET and offset < answer.min_offset:
                if part.fail_on_data_loss and not part.new_queue:
                    raise DataLoss(
                        f"{where}: offsets [{offset}, {answer.min_offset}) are no longer "
                        f"retained (the queue now holds [{answer.min_offset}, "
                        f"{answer.max_offset})); set failOnDataLoss=false to skip them"
                    )
                offset = min(answer.min_offset, part.end)
            elif answer.code in (pb.ILLEGAL_OFFSET, pb.MESSAGE_NOT_FOUND):
                if answer.next_offset > offset:
                    offset = answer.next_offset  # entries filtered or skipped by the node
                    continue
                # Planned against a node that had these offsets; the one answering now does
                # not (yet): a new master still catching up, or data lost in a failover.
                retry(f"{fetcher.address} holds [{answer.min_offset}, {answer.max_offset})")
            elif answer.code in RELOCATE_CODES:
                retry(f"{fetcher.address}: {pb.Code.Name(answer.code)}: {answer.message}")
            else:
                raise FerryError(
                    answer.code, pb.Code.Name(answer.code), f"{where}: {answer.message}"
                )

    finally:
        fetcher.close()


def _may_skip(part: QueueRange, offset: int, answer) -> bool:
    """A gap at the start of an answer means retention moved past ``offset``."""
    if offset >= answer.min_offset:
        return False
    if part.fail_on_data_loss and not part.new_queue:
        raise DataLoss(
            f"{part.topic}/{part.queue_id}: offsets from {offset} are no longer retained "
            f"(the queue now starts at {answer.min_offset}); set failOnDataLoss=false to skip"
        )
    return True
