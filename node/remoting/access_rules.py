"""Access control on the remoting port: each request's ACL 1.0 signature verified and its
permissions decided by the gRPC port's ``AccessControl`` (``node/access.py``): the same
users, secrets, entries and deny-wins decision, only the encodings differ.

What each request code needs (``RULES``; a code not listed needs admin rights, as an
unlisted gRPC method does):

- routes (GET_ROUTEINFO_BY_TOPIC, GET_KV_CONFIG): a valid signature only, as QueryRoute;
- a heartbeat or UNREGISTER_CLIENT naming consumer groups, GET_CONSUMER_LIST_BY_GROUP,
  CONSUMER_SEND_MSG_BACK, LOCK/UNLOCK_BATCH_MQ: SUBSCRIBE on the group (and on the
  locked queues' topics); a producer's heartbeat: a valid signature only;
- sends: PUBLISH on the topic; a send to ``%RETRY%<group>`` (a consumer's fallback when
  sending back fails) needs SUBSCRIBE on the group, as RocketMQ's broker asks;
- pulls, consumer offsets and POP (pop, ack, change of invisibility): SUBSCRIBE on the
  topic and the group; min/max offsets,
  search by time and QUERY_MESSAGE: SUBSCRIBE on the topic;
- END_TRANSACTION: PUBLISH on the topic of the half it ends, read from the half itself
  (RocketMQ 5 asks PUBLISH on the topic the header names, when it names one); a
  transaction the node does not hold pending names no topic: a valid signature, and the
  handler answers it as unknown, changing nothing;
- VIEW_MESSAGE_BY_ID: SUBSCRIBE on the topic of the record at the offset it names (read
  from the record, so a request cannot name another topic; no record: a valid
  signature, and the handler answers "not found"); CHECK_CLIENT_CONFIG: SUBSCRIBE on the
  group its body names;
- the SDK's private codes: FERRY_ROUTE as QueryRoute, FERRY_PRODUCE and FERRY_FETCH by
  gRPC's rules for Data.Produce and Data.Fetch (``node.access.RULES``) applied to the
  request the body carries (a body that does not decode names nothing; its handler
  refuses it).

Every refusal is answered NO_PERMISSION (16) with the reason as the remark
(``UNAUTHENTICATED: ...`` for bad credentials, ``FORBIDDEN: ...`` for a missing permission:
the SDK tells them apart), before the handler runs, so a refused request changes nothing.
RocketMQ's own broker raises an ``AclException`` from its RPC hook, which the 4.x remoting
sources read answer through their generic catch (SYSTEM_ERROR with the exception's text);
ferrymq answers 16, RocketMQ's code for a refused permission, which the 4.x producers also
treat as "try another broker" and then raise with the remark.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from ferrymq.codec.acl_signature import ACCESS_KEY, SIGNATURE
from ferrymq.codec.remoting import RemotingCommand
from ferrymq.codec.remoting_codes import FerryRequestCode, RequestCode, ResponseCode
from ferrymq.protocol.ferrymq import data_pb2 as data
from node.access import (
    DATA,
    PUB,
    SUB,
    AccessControl,
    Need,
    NeedsAdmin,
    Refusal,
    admin_only,
    authenticated_only,
    consuming,
    topic_need,
)
from node.access import RULES as GRPC_RULES
from node.remoting.dispatch import Handler
from node.remoting.signature import contents_to_verify
from routing.acl import ResourceKind

RETRY_PREFIX = "%RETRY%"
# Connection attribute: the access key of the last request verified on it, whose client
# ids it owns (``broker_clients.identity_of``), as the gRPC port's caller identity.
VERIFIED_ACCESS_KEY = "verified_access_key"
METHOD_PREFIX = "remoting:"  # refusals are logged as remoting:<code name>
Rule = Callable[[RemotingCommand], list[Need]]


def _field(request: RemotingCommand, *names: str) -> str:
    for name in names:
        value = request.ext_fields.get(name)
        if value:
            return value
    return ""


def _group(name: str) -> Need:
    if not name:
        raise NeedsAdmin
    return Need(SUB, ResourceKind.GROUP, name)


def _send(request: RemotingCommand) -> list[Need]:
    topic = _field(request, "topic", "b")
    if topic.startswith(RETRY_PREFIX):
        return [_group(topic[len(RETRY_PREFIX) :])]
    return [topic_need(PUB, topic)]


def _consume(request: RemotingCommand) -> list[Need]:
    topic = _field(request, "topic")
    if topic.startswith(RETRY_PREFIX):  # a consumer's own retry topic: its group decides
        return [_group(topic[len(RETRY_PREFIX) :])]
    return consuming(topic, _field(request, "consumerGroup"))


def _topic_read(request: RemotingCommand) -> list[Need]:
    return _consume_topic_only(_field(request, "topic"))


def _consume_topic_only(topic: str) -> list[Need]:
    if topic.startswith(RETRY_PREFIX):
        return [_group(topic[len(RETRY_PREFIX) :])]
    return consuming(topic, "")


def _json_body(request: RemotingCommand) -> dict:
    try:
        data = json.loads(request.body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _heartbeat(request: RemotingCommand) -> list[Need]:
    """SUBSCRIBE on each consumer group the heartbeat joins. A body that cannot be read
    names no group; the handler refuses it and registers nothing."""
    consumers = _json_body(request).get("consumerDataSet")
    if not isinstance(consumers, list):
        return []
    groups = {c.get("groupName") for c in consumers if isinstance(c, dict)}
    return [_group(g) for g in sorted(g for g in groups if isinstance(g, str))]


def _unregister(request: RemotingCommand) -> list[Need]:
    group = _field(request, "consumerGroup")
    return [_group(group)] if group else []


def _locks(request: RemotingCommand) -> list[Need]:
    data = _json_body(request)
    needs = [_group(data.get("consumerGroup") or "")]
    queues = data.get("mqSet")
    for queue in queues if isinstance(queues, list) else ():
        if isinstance(queue, dict) and isinstance(queue.get("topic"), str):
            needs.extend(_consume_topic_only(queue["topic"]))
    return needs


def _batch_ack(request: RemotingCommand) -> list[Need]:
    """Each ack's topic and group (``c`` / ``t``, or their long names), as ACK_MESSAGE's.
    A body that cannot be read names none; the handler refuses it and acks nothing."""
    acks = _json_body(request).get("acks")
    needs: list[Need] = []
    for ack in acks if isinstance(acks, list) else ():
        if not isinstance(ack, dict):
            continue
        group, topic = ack.get("c", ack.get("consumerGroup")), ack.get("t", ack.get("topic"))
        if isinstance(group, str) and isinstance(topic, str):
            needs.extend(consuming(topic, group))
    return needs


def _check_client_config(request: RemotingCommand) -> list[Need]:
    group = _json_body(request).get("group")
    return [_group(group if isinstance(group, str) else "")]


def _data(method: str, message_class) -> Rule:
    """gRPC's rule for ``Data.<method>`` on the request a private code's body carries."""
    rule = GRPC_RULES[DATA + method]

    def needs(request: RemotingCommand) -> list[Need]:
        try:
            carried = message_class.FromString(request.body)
        except DecodeError:
            return []
        return rule(carried)

    return needs


@dataclass(frozen=True)
class Lookups:
    """Node state the rules of requests that name a record (not a topic) read."""

    # The topic of the record at a commit log offset (None: no record there).
    topic_at: Callable[[int], str | None]
    # The topic of the pending transaction a 4.x END_TRANSACTION names by its id or by
    # its half's commit log offset (None: not pending here).
    topic_of_transaction: Callable[[str, int], str | None]


def _named_record_rules(lookups: Lookups) -> dict[int, Rule]:
    def end_transaction(request: RemotingCommand) -> list[Need]:
        topic = lookups.topic_of_transaction(
            request.text("transactionId", ""), request.integer("commitLogOffset", -1)
        )
        return [topic_need(PUB, topic)] if topic is not None else []

    def view_message(request: RemotingCommand) -> list[Need]:
        offset = request.integer("offset", -1)
        topic = lookups.topic_at(offset) if offset >= 0 else None
        return _consume_topic_only(topic) if topic is not None else []

    return {
        RequestCode.END_TRANSACTION: end_transaction,
        RequestCode.VIEW_MESSAGE_BY_ID: view_message,
    }


RULES: dict[int, Rule] = {
    RequestCode.GET_ROUTEINFO_BY_TOPIC: authenticated_only,
    RequestCode.GET_KV_CONFIG: authenticated_only,
    RequestCode.HEART_BEAT: _heartbeat,
    RequestCode.UNREGISTER_CLIENT: _unregister,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: lambda r: [_group(_field(r, "consumerGroup"))],
    RequestCode.SEND_MESSAGE: _send,
    RequestCode.SEND_MESSAGE_V2: _send,
    RequestCode.SEND_BATCH_MESSAGE: _send,
    RequestCode.PULL_MESSAGE: _consume,
    RequestCode.QUERY_CONSUMER_OFFSET: _consume,
    RequestCode.UPDATE_CONSUMER_OFFSET: _consume,
    RequestCode.GET_MAX_OFFSET: _topic_read,
    RequestCode.GET_MIN_OFFSET: _topic_read,
    RequestCode.GET_EARLIEST_MSG_STORETIME: _topic_read,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _topic_read,
    RequestCode.QUERY_MESSAGE: _topic_read,
    RequestCode.CONSUMER_SEND_MSG_BACK: lambda r: [_group(_field(r, "group"))],
    RequestCode.LOCK_BATCH_MQ: _locks,
    RequestCode.UNLOCK_BATCH_MQ: _locks,
    RequestCode.POP_MESSAGE: _consume,
    RequestCode.ACK_MESSAGE: _consume,
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: _consume,
    RequestCode.BATCH_ACK_MESSAGE: _batch_ack,
    RequestCode.CHECK_CLIENT_CONFIG: _check_client_config,
    FerryRequestCode.FERRY_ROUTE: authenticated_only,
    FerryRequestCode.FERRY_PRODUCE: _data("Produce", data.ProduceRequest),
    FerryRequestCode.FERRY_FETCH: _data("Fetch", data.FetchRequest),
}


def _method(code: int) -> str:
    try:
        return METHOD_PREFIX + RequestCode(code).name
    except ValueError:
        return f"{METHOD_PREFIX}{code}"


class RemotingAccess:
    """Wraps each remoting handler, once, with the signature check and its code's rule."""

    def __init__(self, access: AccessControl) -> None:
        self.access = access
        self.rules: dict[int, Rule] = dict(RULES)

    def reading(self, lookups: Lookups) -> None:
        """Add the rules of the codes that name a record, which read the node's state."""
        self.rules.update(_named_record_rules(lookups))

    def wrap(self, code: int, handler: Handler) -> Handler:
        rule = self.rules.get(code, admin_only)
        method = _method(code)
        check = self.access.check_signed

        async def guarded(request: RemotingCommand, connection) -> RemotingCommand | None:
            fields = request.ext_fields
            try:
                user = check(
                    method,
                    fields.get(ACCESS_KEY, ""),
                    fields.get(SIGNATURE, ""),
                    contents_to_verify(request),
                    rule,
                    request,
                )
            except Refusal as refusal:
                return request.reply(ResponseCode.NO_PERMISSION, refusal.message)
            connection.attributes[VERIFIED_ACCESS_KEY] = user.access_key
            return await handler(request, connection)

        return guarded

    def wrap_all(self, handlers: Iterable[tuple[int, Handler]]) -> list[tuple[int, Handler]]:
        return [(code, self.wrap(code, handler)) for code, handler in handlers]
