"""A stored message consumed directly by one online client of a consumer group, as RocketMQ
Dashboard's "resend message" to a group and mqadmin's ``queryMsgById -g -d`` do it: the node
hands the message to one client connected here, the client runs its listener on it and
says what the listener answered. Nothing is stored, no offset or POP state moves: it is a
re-run of the message on one client, to verify a consumer (the dead-letter resend,
``dead_letter_resend.py``, is the one that stores a message for the whole group again).

The doors that hold client connections register their clients here (``DirectConsumers``):

- the remoting door a 4.x consumer's connection, from its heartbeat: RocketMQ's
  CONSUME_MESSAGE_DIRECTLY (309) goes over it with the record in RocketMQ's layout, and
  the client answers a ``ConsumeMessageDirectlyResult`` (``CR_SUCCESS``...); a pull
  consumer (``CONSUME_ACTIVELY``) has no listener and is registered as unable;
- the gRPC door a RocketMQ 5 consumer's Telemetry stream, from its settings: a
  ``verify_message_command`` goes on it and the client answers a ``verify_message_result``
  with the same nonce and a status (OK, FAILED_TO_CONSUME_MESSAGE, NOT_IMPLEMENTED); a
  simple consumer has no listener and is registered as unable.

Who may: admins, and a user who may consume the message's topic as the group (SUBSCRIBE on
both, ``permissions.consume``): the message goes to that group's client, which could
have received it anyway; RocketMQ's ACL 2.0 asks the same (SUB on the topic and the group).

The request is decided in this order, each with its own refusal (``AdminRefused``, a
google.rpc code and a message starting with the name below):

1. ``ILLEGAL_SELECTION``: neither a message id nor a CommitLog offset, or a timeout out of
   range (1 ms .. ``TIMEOUT_MAX_MS``);
2. who may (above; ``AccessDenied``);
3. ``CONSUMER_GROUP_NOT_FOUND``, ``TOPIC_NOT_FOUND``: the group and the topic exist;
4. ``MESSAGE_NOT_FOUND``: the message is stored on this node's broker group in the topic;
5. ``CLIENT_NOT_MEMBER``: a named client is no live member of the group connected here
   (a 4.x client while its heartbeats keep it a member; a RocketMQ 5 client while its
   Telemetry stream is open here, since its heartbeats go to its broker group's master);
   ``NO_ONLINE_CLIENT``: no client named and no such member here whose own user may
   consume the topic as the group;
6. ``DIRECT_CONSUME_UNSUPPORTED``: the client (or, none named, every member here) cannot
   consume directly (a pull or simple consumer); ``CLIENT_MAY_NOT_CONSUME``: the named
   client's own user may not consume the topic as the group (a client is handed nothing it
   could not have received).

The answer is a ``DirectResult``: the client, its door, the outcome (``consumed``, ``later``,
``failed``, ``not_supported`` when the client itself says so, ``timed_out``), the client's
own answer and remark, the time the client says it spent and the time the node waited.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ferrymq.codec.commitlog_record import StoredMessage
from ha.replicated_store import ReplicatedStore
from node.services.admin import INVALID_ARGUMENT, NOT_FOUND, AdminRefused, refused
from node.services.caller import Caller
from node.services.permissions import Permissions, consume
from node.topics import TopicError, TopicTable

FAILED_PRECONDITION = 9
TIMEOUT_DEFAULT_MS = 15_000  # RocketMQ's admin tool waits its default 5 s; listeners vary
TIMEOUT_MAX_MS = 60_000
CLIENTS_PER_GROUP_MAX = 1024  # registered here per group, as the connection lists
GROUPS_MAX = 10_000  # groups with a client registered here, as the members' table


class Outcome(enum.Enum):
    CONSUMED = "consumed"  # the listener answered success
    LATER = "later"  # the listener asked to have it again later (4.x RECONSUME_LATER)
    FAILED = "failed"  # the listener threw, answered nothing, or a 5.x FAILURE
    NOT_SUPPORTED = "not_supported"  # the client answered that it does not do this
    TIMED_OUT = "timed_out"  # no answer in time (or the connection went meanwhile)


@dataclass(frozen=True)
class ClientAnswer:
    """What a door read from the client's answer."""

    outcome: Outcome
    client_answer: str  # the client's own word: CR_SUCCESS, OK, NOT_IMPLEMENTED, a code
    remark: str = ""
    spent_ms: int = -1  # what the client says its listener took; -1 not said


# A door's way to hand one stored message to one client of ``group`` and wait at most
# ``timeout_s`` for its answer (a door answers TIMED_OUT itself, it never raises for it).
Deliver = Callable[[StoredMessage, str, float], Awaitable[ClientAnswer]]
# A door's way to pass an admin tool's request on to the client and wait at most
# ``timeout_s`` for its answer (the door's own request and answer types).
Relay = Callable[[object, float], Awaitable[object]]


@dataclass(frozen=True)
class DirectConsumer:
    """One client a door can reach: its protocol, and how to reach it, or why not."""

    protocol: str  # "remoting" (RocketMQ 4.x) or "grpc" (RocketMQ 5)
    deliver: Deliver | None  # None: the client cannot consume directly
    unable: str = ""  # why not, when ``deliver`` is None
    # Online while registered (a RocketMQ 5 Telemetry stream: its heartbeats go to the
    # master, which may be another node); else while a live member of the group here.
    streamed: bool = False
    caller: Caller | None = None  # who registered it: it gets only what it may consume
    relay: Relay | None = None  # an admin tool's request passed on (4.x: mqadmin's 307)


@dataclass(frozen=True)
class DirectRequest:
    group: str
    topic: str
    message_id: str = ""  # an offset message id, or the message's unique key
    physical_offset: int = -1  # or its CommitLog offset on this node's broker group
    client_id: str = ""  # "": any live member connected here that can
    timeout_ms: int = TIMEOUT_DEFAULT_MS


@dataclass(frozen=True)
class DirectResult:
    client_id: str
    protocol: str
    outcome: Outcome
    client_answer: str
    remark: str
    spent_ms: int  # the client's figure, -1 when it gave none
    waited_ms: int  # from the hand-over to the answer, on the node
    topic: str
    message_id: str  # the offset message id of the record consumed
    broker_group: str

    def as_fields(self) -> dict:
        """Its fields by name, the outcome as its value: the answer of the Admin door
        (ConsumeMessageDirectlyResponse has the same fields) and of the console."""
        return dataclasses.asdict(self) | {"outcome": self.outcome.value}


class DirectConsumers:
    """The clients connected to this node that a door can hand a message to, per group
    and client id, each under its door's key (a connection, a Telemetry stream) so that
    everything of one key leaves in one step when it closes. Bounded per group.

    Thread-safety: owned by the node's event loop."""

    def __init__(self) -> None:
        self._by_group: dict[str, dict[str, tuple[object, DirectConsumer]]] = {}
        self._by_key: dict[object, set[tuple[str, str]]] = {}

    def register(self, key: object, group: str, client_id: str, consumer: DirectConsumer) -> bool:
        """``client_id`` of ``group`` is reachable through ``key``; False (nothing
        registered) past ``CLIENTS_PER_GROUP_MAX`` or ``GROUPS_MAX``."""
        if group not in self._by_group and len(self._by_group) >= GROUPS_MAX:
            return False
        clients = self._by_group.setdefault(group, {})
        if client_id not in clients and len(clients) >= CLIENTS_PER_GROUP_MAX:
            return False
        clients[client_id] = (key, consumer)
        self._by_key.setdefault(key, set()).add((group, client_id))
        return True

    def unregister(self, key: object) -> None:
        for group, client_id in self._by_key.pop(key, ()):
            clients = self._by_group.get(group, {})
            entry = clients.get(client_id)
            if entry is not None and entry[0] is key:
                del clients[client_id]
            if not clients:
                self._by_group.pop(group, None)

    def of(self, group: str) -> dict[str, DirectConsumer]:
        return {client_id: entry[1] for client_id, entry in self._by_group.get(group, {}).items()}


class DirectConsumeService:
    def __init__(
        self,
        store: ReplicatedStore,
        topics: TopicTable,
        live_members: Callable[[str], list[tuple[str, int]]],
        permissions: Permissions,
        broker_group: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``live_members``: the group's live members here (``GroupMembers.live``)."""
        self.store = store
        self.topics = topics
        self.live_members = live_members
        self.permissions = permissions
        self.broker_group = broker_group
        self.clock = clock
        self.consumers = DirectConsumers()

    async def consume(self, caller: Caller, request: DirectRequest) -> DirectResult:
        """Steps 1-6, then the hand-over and the client's answer."""
        _check_shape(request)
        self.permissions.require(caller, consume(request.topic, request.group))
        try:
            self.topics.group(request.group)
            self.topics.topic(request.topic)
        except TopicError as error:
            raise refused(error) from None
        message = self._message(request)
        client_id, consumer = self._client(request)
        assert consumer.deliver is not None
        started = self.clock()
        answer = await consumer.deliver(message, request.group, request.timeout_ms / 1000)
        return DirectResult(
            client_id,
            consumer.protocol,
            answer.outcome,
            answer.client_answer,
            answer.remark,
            answer.spent_ms,
            round((self.clock() - started) * 1000),
            message.topic,
            message.offset_message_id,
            self.broker_group,
        )

    def _message(self, request: DirectRequest) -> StoredMessage:
        found = None
        if request.physical_offset >= 0:
            found = self.store.look_message_by_offset(request.physical_offset)
        elif request.message_id:
            found = self.store.look_message_by_id(request.message_id)
            if found is None or found.topic != request.topic:
                found = self.store.query_by_unique_key(request.topic, request.message_id)
        if found is None or found.topic != request.topic:
            named = request.message_id or f"CommitLog offset {request.physical_offset}"
            raise AdminRefused(
                NOT_FOUND,
                f"MESSAGE_NOT_FOUND: no message {named} of topic {request.topic} is stored "
                f"on broker group {self.broker_group}",
            )
        return found

    def relay_target(self, caller: Caller, group: str, client_id: str) -> DirectConsumer:
        """The client an admin tool's request about it is passed on to (mqadmin's
        GET_CONSUMER_RUNNING_INFO, which ``queryMsgById -g -d`` asks before it asks for a
        direct consumption): admins only, since the answer shows the client's threads,
        queues and settings; ``CLIENT_NOT_MEMBER`` as ``consume``."""
        self.permissions.require_admin(caller)
        return self._member(group, client_id)

    def _here(self, group: str) -> dict[str, DirectConsumer]:
        live = {client_id for client_id, _ in self.live_members(group)}
        return {c: d for c, d in self.consumers.of(group).items() if d.streamed or c in live}

    def _member(self, group: str, client_id: str) -> DirectConsumer:
        consumer = self._here(group).get(client_id)
        if consumer is None:
            raise AdminRefused(
                NOT_FOUND,
                f"CLIENT_NOT_MEMBER: client {client_id} is no live member of group {group} "
                "connected to this node",
            )
        return consumer

    def _client(self, request: DirectRequest) -> tuple[str, DirectConsumer]:
        if request.client_id:
            consumer = self._member(request.group, request.client_id)
            _check_able(request.client_id, consumer)
            self._check_allowed(request, request.client_id, consumer)
            return request.client_id, consumer
        here = {c: d for c, d in self._here(request.group).items() if self._allowed(request, d)}
        if not here:
            raise AdminRefused(
                FAILED_PRECONDITION,
                f"NO_ONLINE_CLIENT: no live member of group {request.group} that may consume "
                f"topic {request.topic} is connected to this node (ask the node its clients "
                "are connected to)",
            )
        able = sorted(c for c, d in here.items() if d.deliver is not None)
        if not able:
            client_id = min(here)
            _check_able(client_id, here[client_id])
        return able[0], here[able[0]]

    def _allowed(self, request: DirectRequest, consumer: DirectConsumer) -> bool:
        """Whether the client's own user may consume the topic as the group (a client is
        handed nothing it could not have received)."""
        if consumer.caller is None:
            return True
        return self.permissions.may(consumer.caller, consume(request.topic, request.group))

    def _check_allowed(self, request: DirectRequest, client_id: str, consumer: DirectConsumer):
        if not self._allowed(request, consumer):
            raise AdminRefused(
                FAILED_PRECONDITION,
                f"CLIENT_MAY_NOT_CONSUME: client {client_id}'s user may not consume topic "
                f"{request.topic} as group {request.group}",
            )


def _check_shape(request: DirectRequest) -> None:
    if not request.message_id and request.physical_offset < 0:
        raise AdminRefused(
            INVALID_ARGUMENT,
            "ILLEGAL_SELECTION: name the message by its id or by its CommitLog offset",
        )
    if not 1 <= request.timeout_ms <= TIMEOUT_MAX_MS:
        raise AdminRefused(
            INVALID_ARGUMENT,
            f"ILLEGAL_SELECTION: timeout {request.timeout_ms} ms is not within 1.."
            f"{TIMEOUT_MAX_MS} ms",
        )


def _check_able(client_id: str, consumer: DirectConsumer) -> None:
    if consumer.deliver is None:
        raise AdminRefused(
            FAILED_PRECONDITION,
            f"DIRECT_CONSUME_UNSUPPORTED: client {client_id} ({consumer.protocol}) cannot "
            f"consume a message directly: {consumer.unable}",
        )
