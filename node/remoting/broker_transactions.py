"""Transactions of RocketMQ 4.x producers: END_TRANSACTION, and the broker's
CHECK_TRANSACTION_STATE over a producer's own connection.

Every rule is ``node/transaction_service.py``'s, the one the gRPC EndTransaction and
Telemetry checks use: a half sent on either port is stored in ``%SYS%TRANS_HALF``, checked,
committed and rolled back the same way, and a transaction resolved on one protocol answers
a repeat on the other. This module only translates:

- END_TRANSACTION (37, oneway from the Java and Go clients): the transaction is the one
  the header's ``transactionId`` names (ferrymq's id, which the send answered in its
  ``transactionId`` field and the check request carries), else the half at
  ``commitLogOffset`` (the offset in the send's message id). ``commitOrRollback`` 8
  commits, 12 rolls back, 0 (unknown) changes nothing, as RocketMQ's broker.
- Checks: a connection that sends a half for producer group G (``PGROUP``), or whose
  heartbeat names G among its ``producerDataSet`` (a producer that restarted), is one of
  G's producers until it closes. A half due for a check goes, oneway, to the next of its
  group's connections, with RocketMQ's header (``tranStateTableOffset``,
  ``commitLogOffset``, ``msgId``, ``transactionId``, ``offsetMsgId``) and the half's record
  as its producer sent it (real topic and queue) as the body; the client answers with
  END_TRANSACTION. A half without a connected group goes to a gRPC producer of its topic.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

from ferrymq.codec.commitlog_record import StoredMessage, encode_stored
from ferrymq.codec.properties import PROPERTY_TRANSACTION_ID, PROPERTY_UNIQ_KEY
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import BROKER_VERSION, RequestCode, ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from node.admission import Admission
from node.parked import as_sent, real_topic_of
from node.remoting.broker_clients import BadHeartbeat, parse_heartbeat
from node.remoting.dispatch import Handler
from node.remoting.status_codes import refusal, response_code
from node.rpc_status import InvalidRequest
from node.transaction_service import HALF_TOPIC, TransactionService
from store.message import Message
from store.results import AppendedMessage

PROPERTY_PRODUCER_GROUP = "PGROUP"
# commitOrRollback of END_TRANSACTION (MessageSysFlag's transaction types).
TRANSACTION_NOT_TYPE = 0
TRANSACTION_COMMIT_TYPE = 8
TRANSACTION_ROLLBACK_TYPE = 12
RESOLUTIONS = {TRANSACTION_COMMIT_TYPE: pb.COMMIT, TRANSACTION_ROLLBACK_TYPE: pb.ROLLBACK}
MAX_PRODUCER_GROUPS = 10_000  # groups whose connections this node remembers
PRODUCER_GROUPS = "producer_groups"  # connection attribute: the groups it produces for
MAX_HEARTBEAT_PRODUCERS = 64  # producer groups noted from one heartbeat
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"  # every 4.x client's own, in every heartbeat


def sent_record(stored: StoredMessage) -> bytes:
    """The half's record as its producer sent it (real topic and queue), RocketMQ's layout:
    the body of a CHECK_TRANSACTION_STATE."""
    return encode_stored(as_sent(stored))


def producer_groups(body: bytes) -> list[str]:
    """The producer groups a HeartbeatData body names (none when it is malformed), at
    most ``MAX_HEARTBEAT_PRODUCERS``; the client's own inner producer is no group."""
    try:
        names = parse_heartbeat(body).producer_groups[:MAX_HEARTBEAT_PRODUCERS]
    except BadHeartbeat:
        return []
    return [n for n in names if n and n != INNER_PRODUCER_GROUP]


class ProducerConnections:
    """The connections of each 4.x producer group (that sent its halves or named it in a
    heartbeat), in round-robin order; a connection leaves every group when it closes."""

    def __init__(self) -> None:
        self._groups: dict[str, list] = {}

    def register(self, group: str, connection) -> None:
        groups = connection.attributes.get(PRODUCER_GROUPS)
        if groups is None:
            groups = connection.attributes[PRODUCER_GROUPS] = set()
            connection.add_close_callback(self._closed)
        if group in groups:
            return
        if group not in self._groups and len(self._groups) >= MAX_PRODUCER_GROUPS:
            return  # checks of this group go to gRPC producers, or count toward rollback
        groups.add(group)
        self._groups.setdefault(group, []).append(connection)

    def _closed(self, connection) -> None:
        for group in connection.attributes.get(PRODUCER_GROUPS, ()):
            connections = self._groups.get(group, [])
            if connection in connections:
                connections.remove(connection)
            if not connections:
                self._groups.pop(group, None)

    def next_of(self, group: str):
        """The next connection of ``group`` (round robin), or None."""
        connections = self._groups.get(group)
        if not connections:
            return None
        connections.append(connections.pop(0))
        return connections[-1]


class TransactionHandlers:
    def __init__(self, transactions: TransactionService, admission: Admission) -> None:
        self.transactions = transactions
        self.admission = admission
        self.producers = ProducerConnections()
        transactions.check_targets.append(self.check)

    def handlers(self) -> list[tuple[int, Handler]]:
        return [(RequestCode.END_TRANSACTION, self.end_transaction)]

    @staticmethod
    def parked(messages: list[Message], batch: bool) -> list[Message]:
        """A transaction half as the gRPC door parks it (``TransactionService.half_of``);
        a batch carries none."""
        if batch:
            raise InvalidRequest(
                pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                "a batch cannot carry transaction half messages",
            )
        return [TransactionService.half_of(message)[0] for message in messages]

    def sent(self, connection, stored: Message, appended: AppendedMessage) -> dict[str, str]:
        """The send reply's fields of a message the store accepted: for a half, its
        transaction id, tracked from now on, and its connection may be asked about it."""
        if stored.topic != HALF_TOPIC:
            return {}
        transaction_id = stored.properties[PROPERTY_TRANSACTION_ID]
        self.transactions.sent(transaction_id, real_topic_of(stored), appended.queue_offset)
        group = stored.properties.get(PROPERTY_PRODUCER_GROUP, "")
        if group:
            self.producers.register(group, connection)
        return {"transactionId": transaction_id}

    def observing_heartbeats(
        self, handlers: list[tuple[int, Handler]]
    ) -> list[tuple[int, Handler]]:
        """``handlers`` with HEART_BEAT's wrapped: the producer groups a heartbeat names
        are noted for its connection first (a malformed body is the heartbeat's to answer)."""
        return [
            (code, self._observing(handler) if code == RequestCode.HEART_BEAT else handler)
            for code, handler in handlers
        ]

    def _observing(self, heartbeat: Handler) -> Handler:
        async def observed(request: RemotingCommand, connection) -> RemotingCommand | None:
            for group in producer_groups(request.body):
                self.producers.register(group, connection)
            return await heartbeat(request, connection)

        return observed

    def check(self, transaction_id: str, stored: StoredMessage) -> bool:
        """Ask a connection of the half's producer group about it; False when none is."""
        connection = self.producers.next_of(stored.properties.get(PROPERTY_PRODUCER_GROUP, ""))
        if connection is None:
            return False
        unique_key = stored.properties.get(PROPERTY_UNIQ_KEY) or stored.offset_message_id
        command = RemotingCommand(
            RequestCode.CHECK_TRANSACTION_STATE,
            version=BROKER_VERSION,
            ext_fields={
                "tranStateTableOffset": str(stored.queue_offset),
                "commitLogOffset": str(stored.physical_offset),
                "msgId": unique_key,
                "transactionId": transaction_id,
                "offsetMsgId": stored.offset_message_id,
            },
            body=sent_record(stored),
        )
        return connection.send_oneway(command)

    async def end_transaction(self, request: RemotingCommand, connection) -> RemotingCommand:
        kind = request.int32("commitOrRollback")
        from_check = request.text("fromTransactionCheck", "false").lower() == "true"
        named = request.text("transactionId", "")
        physical = request.integer("commitLogOffset", -1)
        try:
            self.admission.check_master()
            resolution = RESOLUTIONS.get(kind)
            if resolution is None:
                if kind == TRANSACTION_NOT_TYPE:
                    return request.reply(ResponseCode.SUCCESS, "unknown: the half stays")
                raise InvalidRequest(
                    pb.BAD_REQUEST,
                    f"commitOrRollback {kind}: 8 commits, 12 rolls back, 0 leaves it unknown",
                )
        except InvalidRequest as error:
            code, remark = refusal(error)
            return request.reply(code, remark)
        transaction_id = self.transactions.named(named, physical)
        answer = await self.transactions.end_transaction(
            rpc.EndTransactionRequest(
                transaction_id=transaction_id or named,
                resolution=resolution,
                source=pb.SOURCE_SERVER_CHECK if from_check else pb.SOURCE_CLIENT,
            )
        )
        status = answer.status
        if status.code == pb.OK:
            return request.reply(ResponseCode.SUCCESS)
        return request.reply(response_code(status.code), status.message)
