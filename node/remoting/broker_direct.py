"""A stored message consumed directly by a RocketMQ 4.x consumer connected here
(``node/services/direct_consume.py``): this module registers each consumer a heartbeat
names as a direct consumer of its groups, and translates the hand-over.

- A push consumer (``consumeType`` CONSUME_PASSIVELY) gets CONSUME_MESSAGE_DIRECTLY (309)
  over its own connection, RocketMQ's ``ConsumeMessageDirectlyResultRequestHeader``
  (``consumerGroup``, ``clientId``, ``msgId``, ``brokerName``, ``topic``) and the record in
  the CommitLog layout as the body, as RocketMQ's broker relays it; the Java client
  (``ClientRemotingProcessor``) and the Go client (``ReqConsumeMessageDirectly``) run their
  listener on it and answer a ``ConsumeMessageDirectlyResult`` JSON body: ``consumeResult``
  is CMResult's name from Java, its ordinal from Go (both read here), with ``remark`` and
  ``spentTimeMills``.
- A pull consumer (CONSUME_ACTIVELY: ``DefaultLitePullConsumer``, ``DefaultMQPullConsumer``)
  has no listener: the Java client answers SYSTEM_ERROR "not exist in this consumer", so it
  is registered as unable and never asked.

An admin tool's CONSUME_MESSAGE_DIRECTLY to this node (RocketMQ Dashboard's "resend message"
to a group: it finds the message with VIEW_MESSAGE_BY_ID, then asks the node that stores it
with the header above, ``msgId`` the offset message id) is served by the same service
(``DirectHandlers``): the answer is a ``ConsumeMessageDirectlyResult`` whichever protocol
the client speaks (a 4.x client's own ``consumeResult``; a RocketMQ 5 client's OK as
CR_SUCCESS, FAILED_TO_CONSUME_MESSAGE as CR_LATER, its listener's FAILURE), a timeout
CONSUME_MSG_TIMEOUT as RocketMQ's broker answers it (after 4.5 s: the tool waits 5 s), a
refusal SYSTEM_ERROR with its remark (NO_PERMISSION for the ACL). mqadmin's
``queryMsgById -g -d`` asks GET_CONSUMER_RUNNING_INFO (307) of the client first (to see
that it is a push consumer): this node passes it on to a 4.x client and its answer back,
as RocketMQ's broker does, for admins only (the answer shows the client's threads,
queues and settings).

Thread-safety: handlers run on the node's event loop.
"""

from __future__ import annotations

import json

from ferrymq.codec.commitlog_record import StoredMessage, encode_stored
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import BROKER_VERSION, RequestCode, ResponseCode
from node.remoting.authentication import DoorHandler
from node.remoting.status_codes import refusal
from node.rpc_status import InvalidRequest
from node.services.admin import AdminRefused
from node.services.caller import Caller
from node.services.direct_consume import (
    ClientAnswer,
    DirectConsumer,
    DirectConsumers,
    DirectRequest,
    DirectResult,
    Outcome,
)
from node.services.registry import Services

PROTOCOL = "remoting"
PUSH = "CONSUME_PASSIVELY"
DIRECT_CONSUMING = "direct_consuming"  # connection attribute: registered here
# CMResult, in its declared order (the Go client sends the ordinal).
CM_RESULTS = (
    "CR_SUCCESS",
    "CR_LATER",
    "CR_ROLLBACK",
    "CR_COMMIT",
    "CR_THROW_EXCEPTION",
    "CR_RETURN_NULL",
)
OUTCOMES = {
    "CR_SUCCESS": Outcome.CONSUMED,
    "CR_COMMIT": Outcome.CONSUMED,  # an orderly listener's COMMIT
    "CR_LATER": Outcome.LATER,  # RECONSUME_LATER, SUSPEND_CURRENT_QUEUE_A_MOMENT
    "CR_ROLLBACK": Outcome.LATER,  # an orderly listener's ROLLBACK
}


def direct_request(stored: StoredMessage, group: str, client_id: str, broker_group: str):
    return RemotingCommand(
        RequestCode.CONSUME_MESSAGE_DIRECTLY,
        version=BROKER_VERSION,
        ext_fields={
            "consumerGroup": group,
            "clientId": client_id,
            "msgId": stored.offset_message_id,
            "brokerName": broker_group,
            "topic": stored.topic,
        },
        body=encode_stored(stored),
    )


def answer_of(response: RemotingCommand) -> ClientAnswer:
    """What a client's answer to CONSUME_MESSAGE_DIRECTLY says."""
    if response.code != ResponseCode.SUCCESS:
        return ClientAnswer(Outcome.FAILED, f"code {response.code}", response.remark or "")
    try:
        result = json.loads(response.body)
    except ValueError:
        result = None
    if type(result) is not dict:
        return ClientAnswer(Outcome.FAILED, "unreadable", "the answer's body is not JSON")
    said = result.get("consumeResult")
    if type(said) is int and 0 <= said < len(CM_RESULTS):
        said = CM_RESULTS[said]
    said = said if type(said) is str else "none"
    spent = result.get("spentTimeMills")
    return ClientAnswer(
        OUTCOMES.get(said, Outcome.FAILED),
        said,
        str(result.get("remark") or ""),
        spent if type(spent) is int else -1,
    )


class RemotingDirectConsumers:
    """Registers the 4.x consumers of this node's connections (``heard``)."""

    def __init__(self, consumers: DirectConsumers, broker_group: str) -> None:
        self.consumers = consumers
        self.broker_group = broker_group

    def heard(
        self, connection, caller: Caller, client_id: str, group: str, consume_type: str
    ) -> None:
        """``connection``'s client ``client_id`` is a member of ``group`` (its heartbeat)."""
        relay = connection.request  # (request, timeout_s): the client's answer
        if consume_type == PUSH:
            deliver = self._deliver_to(connection, client_id)
            consumer = DirectConsumer(PROTOCOL, deliver, caller=caller, relay=relay)
        else:
            unable = f"a {consume_type} (pull) consumer has no listener to run"
            consumer = DirectConsumer(PROTOCOL, None, unable, caller=caller, relay=relay)
        self.consumers.register(connection, group, client_id, consumer)
        if not connection.attributes.get(DIRECT_CONSUMING):
            connection.attributes[DIRECT_CONSUMING] = True
            connection.add_close_callback(self.consumers.unregister)

    def _deliver_to(self, connection, client_id: str):
        async def deliver(stored: StoredMessage, group: str, timeout_s: float) -> ClientAnswer:
            request = direct_request(stored, group, client_id, self.broker_group)
            try:
                response = await connection.request(request, timeout_s)
            except TimeoutError:
                return ClientAnswer(Outcome.TIMED_OUT, "", f"no answer in {timeout_s:g} s")
            except ConnectionError as error:
                return ClientAnswer(Outcome.TIMED_OUT, "", f"no answer: {error}")
            return answer_of(response)

        return deliver


# GetConsumerRunningInfoRequestHeader: what is passed on to the client (not the tool's
# signature fields).
RUNNING_INFO_FIELDS = ("consumerGroup", "clientId", "jstackEnable", "rpcTimeout")
# RocketMQ's admin tool gives up after its 5 s default: the node answers before it does.
ADMIN_TOOL_WAIT_MS = 4_500
# What an admin tool is answered for a client whose own word is not CMResult's.
RESULT_NAMES = {
    Outcome.CONSUMED: "CR_SUCCESS",
    Outcome.LATER: "CR_LATER",
    Outcome.FAILED: "CR_LATER",  # a RocketMQ 5 listener's FAILURE: consumed again later
}


def result_body(result: DirectResult) -> bytes:
    """RocketMQ's ``ConsumeMessageDirectlyResult`` of a client's answer."""
    said = result.client_answer
    name = said if said in CM_RESULTS else RESULT_NAMES[result.outcome]
    body = {
        "order": False,
        "autoCommit": True,
        "consumeResult": name,
        "remark": result.remark or None,
        "spentTimeMills": max(result.spent_ms, 0),
    }
    return json.dumps(body, separators=(",", ":")).encode()


class DirectHandlers:
    """CONSUME_MESSAGE_DIRECTLY asked of this node by an admin tool."""

    def __init__(self, services: Services) -> None:
        self.service = services.direct_consume

    def handlers(self) -> list[tuple[int, DoorHandler]]:
        return [
            (RequestCode.CONSUME_MESSAGE_DIRECTLY, self.consume_directly),
            (RequestCode.GET_CONSUMER_RUNNING_INFO, self.running_info),
        ]

    async def running_info(self, request: RemotingCommand, connection, caller: Caller):
        """mqadmin's GET_CONSUMER_RUNNING_INFO, passed on to the client as RocketMQ's
        broker relays it (its header, no body), the client's answer passed back."""
        group, client_id = request.text("consumerGroup", ""), request.text("clientId", "")
        try:
            consumer = self.service.relay_target(caller, group, client_id)
        except AdminRefused as refused:
            return request.reply(ResponseCode.SYSTEM_ERROR, refused.message)
        except InvalidRequest as error:  # the ACL
            return request.reply(*refusal(error))
        if consumer.relay is None:
            return request.reply(
                ResponseCode.SYSTEM_ERROR,
                f"client {client_id} is a {consumer.protocol} client: no running info",
            )
        fields = {k: v for k, v in request.ext_fields.items() if k in RUNNING_INFO_FIELDS}
        asked = RemotingCommand(request.code, version=BROKER_VERSION, ext_fields=fields)
        try:
            answer = await consumer.relay(asked, ADMIN_TOOL_WAIT_MS / 1000)
        except TimeoutError:
            remark = f"consumer <{group}> <{client_id}> did not answer in time"
            return request.reply(ResponseCode.CONSUME_MSG_TIMEOUT, remark)
        except ConnectionError as error:
            return request.reply(ResponseCode.SYSTEM_ERROR, f"client {client_id}: {error}")
        return request.reply(answer.code, answer.remark, body=answer.body)

    async def consume_directly(self, request: RemotingCommand, connection, caller: Caller):
        asked = DirectRequest(
            request.text("consumerGroup", ""),
            request.text("topic", ""),
            request.text("msgId", ""),
            client_id=request.text("clientId", ""),
            timeout_ms=ADMIN_TOOL_WAIT_MS,
        )
        try:
            result = await self.service.consume(caller, asked)
        except AdminRefused as refused:
            return request.reply(ResponseCode.SYSTEM_ERROR, refused.message)
        except InvalidRequest as error:  # the ACL
            return request.reply(*refusal(error))
        if result.outcome is Outcome.TIMED_OUT:
            remark = f"consumer <{asked.group}> <{result.client_id}> {result.remark}"
            return request.reply(ResponseCode.CONSUME_MSG_TIMEOUT, remark)
        if result.outcome is Outcome.NOT_SUPPORTED or result.client_answer.startswith("code "):
            remark = f"client {result.client_id}: {result.client_answer} {result.remark}"
            return request.reply(ResponseCode.SYSTEM_ERROR, remark.strip())
        return request.reply(ResponseCode.SUCCESS, body=result_body(result))
