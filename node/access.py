"""Access control on the client port: a wrapper around every served method that authenticates
every call and authorizes it against the resources its request names, before the service
sees it. A refused call reaches no service code, so it stores, acks or changes nothing.

What each RPC needs (``RULES``; a method not listed needs admin rights):

- topology and session RPCs (QueryRoute, QueryAssignment, Telemetry, and a producer's
  Heartbeat and NotifyClientTermination): a valid signature only;
- a consumer's Heartbeat and NotifyClientTermination (they name its group): SUBSCRIBE on
  the group;
- publishing (SendMessage, EndTransaction, Data.Produce): PUBLISH on the topic;
- consuming (Receive, Ack, ChangeInvisibleDuration, ForwardToDLQ, Pull, offsets,
  Data.Fetch): SUBSCRIBE on the topic and, when the request names one, on the group;
- Admin reads scoped to one topic or group (DescribeTopic, message queries, group
  progress and members): PUBLISH or SUBSCRIBE as listed below; ClusterStatus (the nodes,
  their addresses and roles: where the SDK learns the nodes' remoting addresses, as
  QueryRoute already names the masters): a valid signature only; every other Admin RPC
  (changes, listings, failover, users and ACLs): admin rights.

Refusals: the RocketMQ 5 MessagingService answers in its response status, as the Java
proxy does — ``UNAUTHORIZED`` (40100) for bad credentials, ``FORBIDDEN`` (40300) for a
missing permission — which the official clients raise as ``UnauthorizedException`` and
``ForbiddenException``. ferrymq's own services (Admin, Data) abort with gRPC
``UNAUTHENTICATED`` and ``PERMISSION_DENIED``. Refusals are logged (access key, method,
reason; never a secret or a signature), at most once per ten seconds per method and kind
(bad credentials, or a given user's missing permission), so no client can flood the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from node.authentication import AuthenticationError, Authenticator
from routing.acl import Action, ResourceKind, User, is_allowed

log = logging.getLogger("ferrymq.auth")
MESSAGING = "/apache.rocketmq.v2.MessagingService/"
ADMIN = "/ferrymq.admin.v1.Admin/"
DATA = "/ferrymq.data.v1.Data/"
LOG_EVERY_S = 10.0
LOG_KEYS_MAX = 10_000
LOG_REASON_CHARS = 200  # a reason may quote a header value the caller sent
BAD_CREDENTIALS = ""  # no access key is empty (routing.acl.ACCESS_KEY_PATTERN)
PUB, SUB = (Action.PUBLISH,), (Action.SUBSCRIBE,)
PUB_OR_SUB = (Action.PUBLISH, Action.SUBSCRIBE)
TOPIC = ResourceKind.TOPIC


@dataclass(frozen=True)
class Need:
    """One permission a call needs: any of ``actions`` on the resource."""

    actions: tuple[Action, ...]
    kind: ResourceKind
    name: str


class NeedsAdmin(Exception):
    """The request is one only an admin may make."""


def topic_need(actions, name: str) -> Need:
    if not name:  # e.g. EndTransaction may omit it: only an admin may act on any topic
        raise NeedsAdmin
    return Need(actions, ResourceKind.TOPIC, name)


def consuming(topic: str, group: str) -> list[Need]:
    needs = [topic_need(SUB, topic)]
    if group:
        needs.append(Need(SUB, ResourceKind.GROUP, group))
    return needs


def admin_only(request) -> list[Need]:
    raise NeedsAdmin


def _query_by_id(request) -> list[Need]:
    if not request.topic:  # a lookup across every topic
        raise NeedsAdmin
    return [topic_need(PUB_OR_SUB, request.topic)]


def _publish_all(request) -> list[Need]:
    return [topic_need(PUB, name) for name in {m.topic.name for m in request.messages}]


def authenticated_only(request) -> list[Need]:
    return []


def _membership(request) -> list[Need]:
    """A consumer's heartbeat or termination makes or ends a member of its group, which
    decides the pull consumers' queue split: SUBSCRIBE on the group. A producer's names no
    group and changes nothing: credentials only."""
    if not request.HasField("group"):
        return []
    return [Need(SUB, ResourceKind.GROUP, request.group.name)]


RULES: dict[str, Callable[[object], list[Need]]] = {
    MESSAGING + "QueryRoute": authenticated_only,
    MESSAGING + "QueryAssignment": authenticated_only,
    MESSAGING + "Heartbeat": _membership,
    MESSAGING + "NotifyClientTermination": _membership,
    MESSAGING + "Telemetry": authenticated_only,
    MESSAGING + "SendMessage": _publish_all,
    MESSAGING + "EndTransaction": lambda r: [topic_need(PUB, r.topic.name)],
    MESSAGING + "ReceiveMessage": lambda r: consuming(r.message_queue.topic.name, r.group.name),
    MESSAGING + "AckMessage": lambda r: consuming(r.topic.name, r.group.name),
    MESSAGING + "ChangeInvisibleDuration": lambda r: consuming(r.topic.name, r.group.name),
    MESSAGING + "ForwardMessageToDeadLetterQueue": lambda r: consuming(r.topic.name, r.group.name),
    MESSAGING + "PullMessage": lambda r: consuming(r.message_queue.topic.name, r.group.name),
    MESSAGING + "UpdateOffset": lambda r: consuming(r.message_queue.topic.name, r.group.name),
    MESSAGING + "GetOffset": lambda r: consuming(r.message_queue.topic.name, r.group.name),
    MESSAGING + "QueryOffset": lambda r: consuming(r.message_queue.topic.name, ""),
    DATA + "Produce": lambda r: [topic_need(PUB, r.topic)],
    DATA + "Fetch": lambda r: consuming(r.topic, r.group),
    ADMIN + "ClusterStatus": authenticated_only,
    ADMIN + "DescribeTopic": lambda r: [topic_need(PUB_OR_SUB, r.name)],
    ADMIN + "GroupProgress": lambda r: consuming(r.topic, r.group),
    ADMIN + "GroupMembers": lambda r: [Need(SUB, ResourceKind.GROUP, r.group)],
    ADMIN + "QueryMessageById": _query_by_id,
    ADMIN + "QueryMessageByKey": lambda r: consuming(r.topic, ""),
    ADMIN + "QueryMessageByOffset": lambda r: consuming(r.topic, ""),
    ADMIN + "QueryOffsetByTime": lambda r: consuming(r.topic, ""),
}


@dataclass
class _LogWindow:
    logged_at: float
    left_out: int = 0  # refusals not logged since


class Refusal(Exception):
    def __init__(self, authenticated: bool, message: str) -> None:
        super().__init__(message)
        self.authenticated = authenticated  # False: bad credentials; True: no permission
        self.message = message


class AccessControl:
    """Decides one call: ``check`` returns the user or raises ``Refusal``."""

    def __init__(self, authenticator: Authenticator, clock: Callable[[], float] = time.monotonic):
        self.authenticator = authenticator
        self.clock = clock
        self._logged: dict[tuple[str, str], _LogWindow] = {}

    def check(self, method: str, metadata: dict[str, str], request: object) -> User:
        try:
            user = self.authenticator.authenticate(metadata)
        except AuthenticationError as error:
            self._refuse_credentials(method, _claimed_access_key(metadata), error)
        return self.authorize(method, user, RULES.get(method, admin_only), request)

    def check_signed(
        self,
        method: str,
        access_key: str,
        signature: str,
        contents: Sequence[bytes],
        rule: Callable[[object], list[Need]],
        request: object,
    ) -> User:
        """``check`` for a request signed with RocketMQ ACL 1.0 (the remoting port): the
        same users, the same decision, with the request's own ``rule``."""
        try:
            user = self.authenticator.authenticate_content(access_key, signature, contents)
        except AuthenticationError as error:
            self._refuse_credentials(method, access_key[:64], error)
        return self.authorize(method, user, rule, request)

    def _refuse_credentials(self, method: str, claimed: str, error: AuthenticationError):
        self._log_refusal(method, BAD_CREDENTIALS, claimed, str(error))
        raise Refusal(False, f"UNAUTHENTICATED: {error}") from None

    def authorize(
        self, method: str, user: User, rule: Callable[[object], list[Need]], request: object
    ) -> User:
        """``user`` when it holds every permission ``rule(request)`` names, else
        ``Refusal``; a rule raising ``NeedsAdmin`` admits admins only."""
        try:
            needs = rule(request)
        except NeedsAdmin:
            if user.admin:
                return user
            reason = f"{method.rsplit('/', 1)[-1]} needs admin rights"
            self._log_refusal(method, user.access_key, user.access_key, reason)
            raise Refusal(True, f"FORBIDDEN: user {user.access_key}: {reason}") from None
        for need in needs:
            if not any(is_allowed(user, action, need.kind, need.name) for action in need.actions):
                wanted = " or ".join(a.value.lower() for a in need.actions)
                reason = f"no {wanted} permission on {need.kind.value.lower()} {need.name}"
                self._log_refusal(method, user.access_key, user.access_key, reason)
                raise Refusal(True, f"FORBIDDEN: user {user.access_key} has {reason}")
        return user

    def _log_refusal(self, method: str, refused: str, access_key: str, reason: str) -> None:
        """Log at most one refusal per ``LOG_EVERY_S`` for each method and ``refused``:
        ``BAD_CREDENTIALS``, or the verified access key of a user lacking a permission.
        Neither is the caller's free choice (a claimed access key and the reason's text
        are), so a flood of refusals logs at a bounded rate and keeps bounded memory; the
        next line logged says how many were left out."""
        now = self.clock()
        key = (method, refused)
        window = self._logged.get(key)
        if window is not None and now - window.logged_at < LOG_EVERY_S:
            window.left_out += 1
            return
        if window is None and len(self._logged) >= LOG_KEYS_MAX:
            self._logged.clear()  # methods x users: only a cluster with very many users
        self._logged[key] = _LogWindow(now)
        left_out = window.left_out if window is not None else 0
        log.warning(
            "refused %s from access key %r: %s%s",
            method,
            access_key[:64],
            reason[:LOG_REASON_CHARS],
            f" ({left_out} more like it in the last {LOG_EVERY_S:.0f} s not logged)"
            if left_out
            else "",
        )


def _claimed_access_key(metadata: dict[str, str]) -> str:
    header = metadata.get("authorization", "")
    _, _, rest = header.partition("Credential=")
    return rest.partition(",")[0][:64]


class MethodAccess:
    """Wraps each served method once, when it is registered (``node/method_wrapping.py``),
    with ``AccessControl.check``."""

    def __init__(self, access: AccessControl) -> None:
        self.access = access

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        check = self.access.check
        refused = _refusal_answer(method)
        short = method.rsplit("/", 1)[-1]
        response_class = getattr(rpc, f"{short}Response", None)

        async def decide(request, context) -> object | None:
            """None when allowed, else what to answer (or the call is aborted)."""
            metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
            try:
                check(method, metadata, request)
            except Refusal as refusal:
                return await refused(refusal, context, response_class)
            return None

        if handler.unary_unary is not None:
            behavior = handler.unary_unary

            async def unary(request, context):
                answer = await decide(request, context)
                if answer is not None:
                    return answer
                return await behavior(request, context)

            return grpc.unary_unary_rpc_method_handler(
                unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            behavior = handler.unary_stream

            async def unary_stream(request, context):
                answer = await decide(request, context)
                if answer is not None:
                    yield answer
                    return
                async for response in behavior(request, context):
                    yield response

            return grpc.unary_stream_rpc_method_handler(
                unary_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None:
            behavior = handler.stream_stream

            async def stream_stream(request_iterator, context):
                # The session stream names no resource: the signature is what it needs.
                metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
                try:
                    user = check(method, metadata, None)
                except Refusal as refusal:
                    await context.abort(grpc.StatusCode.UNAUTHENTICATED, refusal.message)
                commands = _publishable_settings(user, request_iterator)
                async for response in behavior(commands, context):
                    yield response

            return grpc.stream_stream_rpc_method_handler(
                stream_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        raise TypeError(f"{method}: unsupported handler kind for access control")


async def _publishable_settings(user: User, commands):
    """A producer's settings name the topics it publishes to, and the node sends it the
    orphan-transaction checks (whole messages) of those topics: keep only the topics the
    user may publish to."""
    async for command in commands:
        if command.WhichOneof("command") == "settings":
            topics = command.settings.publishing.topics
            allowed = [t for t in topics if is_allowed(user, Action.PUBLISH, TOPIC, t.name)]
            if len(allowed) != len(topics):
                del topics[:]
                topics.extend(allowed)
        yield command


def _refusal_answer(method: str):
    """How ``method`` tells a client it was refused."""
    if method.startswith(MESSAGING):

        async def in_status(refusal: Refusal, context, response_class):
            code = pb.FORBIDDEN if refusal.authenticated else pb.UNAUTHORIZED
            return response_class(status=pb.Status(code=code, message=refusal.message))

        return in_status

    async def aborted(refusal: Refusal, context, response_class):
        code = (
            grpc.StatusCode.PERMISSION_DENIED
            if refusal.authenticated
            else grpc.StatusCode.UNAUTHENTICATED
        )
        await context.abort(code, refusal.message)

    return aborted
