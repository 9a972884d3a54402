"""Transactions of RocketMQ 4.x producers: END_TRANSACTION, and the broker's
CHECK_TRANSACTION_STATE over a producer's own connection, on the transaction service
(``node/services/transactions.py``), the one the gRPC EndTransaction and Telemetry checks
use: a half sent on either port is stored in ``%SYS%TRANS_HALF``, checked, committed and
rolled back the same way, and a transaction resolved on one protocol answers a repeat on
the other. This module only translates:

- END_TRANSACTION (37, oneway from the Java and Go clients): the transaction is the one
  the header's ``transactionId`` names (ferrymq's id, which the send answered in its
  ``transactionId`` field and the check request carries), else the half at
  ``commitLogOffset`` (the offset in the send's message id). ``commitOrRollback`` 8
  commits, 12 rolls back, 0 (unknown) changes nothing, as RocketMQ's broker. The service
  decides who may (PUBLISH on the half's topic, read from the half).
- Checks: a connection that sends a half for producer group G (``PGROUP``), or whose
  heartbeat names G among its ``producerDataSet`` (a producer that restarted), is one of
  G's producers until it closes (``TransactionDoor.producing``: the service's
  ``CheckTargets``, which asks a producer only about halves of topics its user may publish
  to). A check goes, oneway, with RocketMQ's header (``tranStateTableOffset``,
  ``commitLogOffset``, ``msgId``, ``transactionId``, ``offsetMsgId``) and the half's record
  as its producer sent it (real topic and queue) as the body; the client answers with
  END_TRANSACTION.

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

from ferrymq.codec.commitlog_record import StoredMessage, encode_stored
from ferrymq.codec.properties import PROPERTY_UNIQ_KEY
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import BROKER_VERSION, RequestCode, ResponseCode
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.parked import as_sent
from node.remoting.authentication import DoorHandler
from node.remoting.status_codes import refusal, response_code
from node.rpc_status import InvalidRequest
from node.services.caller import Caller
from node.services.registry import Services
from node.services.transactions import PROPERTY_PRODUCER_GROUP, EndRequest
from store.message import Message

# commitOrRollback of END_TRANSACTION (MessageSysFlag's transaction types).
TRANSACTION_NOT_TYPE = 0
TRANSACTION_COMMIT_TYPE = 8
TRANSACTION_ROLLBACK_TYPE = 12
RESOLUTIONS = {TRANSACTION_COMMIT_TYPE: pb.COMMIT, TRANSACTION_ROLLBACK_TYPE: pb.ROLLBACK}
PRODUCES_FOR_CHECKS = "produces_for_checks"  # connection attribute: registered as a target
INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"  # every 4.x client's own, in every heartbeat


def sent_record(stored: StoredMessage) -> bytes:
    """The half's record as its producer sent it (real topic and queue), RocketMQ's layout:
    the body of a CHECK_TRANSACTION_STATE."""
    return encode_stored(as_sent(stored))


def check_request(transaction_id: str, stored: StoredMessage) -> RemotingCommand:
    unique_key = stored.properties.get(PROPERTY_UNIQ_KEY) or stored.offset_message_id
    return RemotingCommand(
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


class TransactionDoor:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.targets = services.transactions.targets

    def handlers(self) -> list[tuple[int, DoorHandler]]:
        return [(RequestCode.END_TRANSACTION, self.end_transaction)]

    def producing(self, connection, caller: Caller, half: Message) -> None:
        """``connection`` sent ``half``: it may be asked about its producer group's halves."""
        group = half.properties.get(PROPERTY_PRODUCER_GROUP, "")
        if group:
            self.producing_for(connection, caller, [group])

    def producing_for(self, connection, caller: Caller, groups: list[str]) -> None:
        """``connection`` produces for ``groups`` (a heartbeat named them); InvalidRequest
        past the service's bounds, registering none of them."""
        groups = [g for g in groups if g and g != INNER_PRODUCER_GROUP]
        if not groups:
            return
        self.targets.register(
            connection,
            caller,
            lambda transaction_id, stored: connection.send_oneway(
                check_request(transaction_id, stored)
            ),
            groups=groups,
        )
        if not connection.attributes.get(PRODUCES_FOR_CHECKS):
            connection.attributes[PRODUCES_FOR_CHECKS] = True
            connection.add_close_callback(self.targets.unregister)

    async def end_transaction(
        self, request: RemotingCommand, connection, caller: Caller
    ) -> RemotingCommand:
        kind = request.int32("commitOrRollback")
        from_check = request.text("fromTransactionCheck", "false").lower() == "true"
        if kind not in RESOLUTIONS and kind != TRANSACTION_NOT_TYPE:
            return request.reply(
                ResponseCode.SYSTEM_ERROR,
                f"commitOrRollback {kind}: 8 commits, 12 rolls back, 0 leaves it unknown",
            )
        ending = EndRequest(
            request.text("transactionId", ""),
            RESOLUTIONS.get(kind),
            source=pb.SOURCE_SERVER_CHECK if from_check else pb.SOURCE_CLIENT,
            half_offset=request.integer("commitLogOffset", -1),
        )
        try:
            status = await self.services.transactions.end(caller, ending)
        except InvalidRequest as error:
            return request.reply(*refusal(error))
        if status.code == pb.OK:
            return request.reply(
                ResponseCode.SUCCESS, status.message if ending.resolution is None else None
            )
        return request.reply(response_code(status.code), status.message)
