"""RocketMQ 5 namespaces on the gRPC side: a client configured with a namespace names its
topics and groups plainly and the server stores them as ``<namespace>%<name>``.

A client says its namespace in the ``x-mq-namespace`` header and in every ``Resource``'s
``resource_namespace`` (the official clients set both). As Apache RocketMQ's proxy does, a
resource is qualified with its own ``resource_namespace``, else with the header's:
``orders`` in ``shop`` is the topic ``shop%orders``, the group ``readers`` is
``shop%readers``, its retry and dead-letter topics ``%RETRY%shop%readers`` and
``%DLQ%shop%readers``. A name that already carries the namespace, and ferrymq's system
topics (``%SYS%...``), are left as they are. Answers go the other way: every ``Resource``
in them that belongs to the namespace is given back unqualified with its
``resource_namespace`` set, so a route or a received message names the topic the client
asked for.

The rewrite is a method wrapper (``node/method_wrapping.py``) inside forwarding (a
forwarded call is qualified once, on the master, from the client's own bytes) and outside
access control (ACLs and every rule in ``node/admission.py`` see the qualified names, the
names topics and groups are created with through the Admin service). A call naming no
namespace is passed through untouched after one look at its metadata and resources.

A namespace is 1-64 of ``[a-zA-Z0-9_-]`` (RocketMQ's rule); anything else is refused with
``BAD_REQUEST`` in the answer's status (INVALID_ARGUMENT for Telemetry, which has none)
before the call does anything.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from functools import cache

import grpc
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from node.grpc.request_decoding import UntilRefused

NAMESPACE_HEADER = "x-mq-namespace"
SEPARATOR = "%"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SYSTEM_PREFIX = "%SYS%"
NAMESPACE_PATTERN = re.compile(r"[a-zA-Z0-9_-]{1,64}")
MESSAGING = "/apache.rocketmq.v2.MessagingService/"
RESOURCE = pb.Resource.DESCRIPTOR.full_name


class BadNamespace(ValueError):
    """A namespace that is not RocketMQ's ``[a-zA-Z0-9_-]{1,64}``."""


def qualify(namespace: str, name: str) -> str:
    """``name`` as stored under ``namespace`` (RocketMQ's ``wrapNamespace``)."""
    if not namespace or not name or name.startswith(SYSTEM_PREFIX):
        return name
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if name.startswith(prefix):
            return prefix + qualify(namespace, name[len(prefix) :])
    if name.startswith(namespace + SEPARATOR):
        return name
    return f"{namespace}{SEPARATOR}{name}"


def unqualify(namespace: str, name: str) -> str | None:
    """``name`` as a client in ``namespace`` knows it; None when it is not of that
    namespace (RocketMQ's ``withoutNamespace``)."""
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if name.startswith(prefix):
            inner = unqualify(namespace, name[len(prefix) :])
            return None if inner is None else prefix + inner
    own = namespace + SEPARATOR
    return name[len(own) :] if name.startswith(own) else None


def checked(namespace: str) -> str:
    if namespace and not NAMESPACE_PATTERN.fullmatch(namespace):
        raise BadNamespace(f"namespace {namespace[:80]!r} is not 1-64 characters of [a-zA-Z0-9_-]")
    return namespace


@cache
def _holds_resources(descriptor: Descriptor) -> tuple[FieldDescriptor, ...]:
    """The message fields of ``descriptor`` through which a ``Resource`` can be reached."""
    found = []
    for field in descriptor.fields:
        if field.message_type is None or field.message_type.GetOptions().map_entry:
            continue
        if field.message_type.full_name == RESOURCE or _reaches_resource(field.message_type):
            found.append(field)
    return tuple(found)


@cache
def _reaches_resource(descriptor: Descriptor, seen: frozenset[str] = frozenset()) -> bool:
    if descriptor.full_name in seen:
        return False
    inner = seen | {descriptor.full_name}
    for field in descriptor.fields:
        message = field.message_type
        if message is None:
            continue
        if message.full_name == RESOURCE or _reaches_resource(message, inner):
            return True
    return False


def _resources(message: Message) -> list[pb.Resource]:
    """Every ``Resource`` set anywhere in ``message``."""
    found: list[pb.Resource] = []
    for field in _holds_resources(message.DESCRIPTOR):
        if field.is_repeated:
            values = list(getattr(message, field.name))
        elif message.HasField(field.name):
            values = [getattr(message, field.name)]
        else:
            continue
        for value in values:
            if value.DESCRIPTOR.full_name == RESOURCE:
                found.append(value)
            else:
                found.extend(_resources(value))
    return found


def qualify_request(request: Message, default: str) -> str:
    """Qualify every resource of ``request`` in place; the namespace the call is in (its
    resources' own, else ``default``, the header's), "" for none."""
    namespace = checked(default)
    for resource in _resources(request):
        own = checked(resource.resource_namespace) or namespace
        if own:
            namespace = namespace or own
            resource.name = qualify(own, resource.name)
            resource.resource_namespace = ""
    return namespace


def unqualify_answer(answer: Message, namespace: str) -> Message:
    """Give every resource of ``answer`` of ``namespace`` back as the client names it."""
    if namespace:
        for resource in _resources(answer):
            plain = unqualify(namespace, resource.name)
            if plain is not None:
                resource.name = plain
                resource.resource_namespace = namespace
    return answer


def _header(context) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == NAMESPACE_HEADER and isinstance(value, str):
            return value
    return ""


def _refusal(response_class, error: BadNamespace):
    return response_class(status=pb.Status(code=pb.BAD_REQUEST, message=str(error)))


def wrap_namespaces(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """The method wrapper: MessagingService calls qualified, their answers unqualified."""
    if not method.startswith(MESSAGING):
        return handler
    short = method.rsplit("/", 1)[-1]
    response_class = getattr(rpc, f"{short}Response", None)
    make: Callable
    if handler.unary_unary is not None:
        behavior = handler.unary_unary

        async def unary(request, context):
            try:
                namespace = qualify_request(request, _header(context))
            except BadNamespace as error:
                return _refusal(response_class, error)
            answer = await behavior(request, context)
            return unqualify_answer(answer, namespace) if isinstance(answer, Message) else answer

        make, wrapped = grpc.unary_unary_rpc_method_handler, unary
    elif handler.unary_stream is not None:
        behavior = handler.unary_stream

        async def unary_stream(request, context):
            try:
                namespace = qualify_request(request, _header(context))
            except BadNamespace as error:
                yield _refusal(response_class, error)
                return
            async for answer in behavior(request, context):
                yield unqualify_answer(answer, namespace) if isinstance(answer, Message) else answer

        make, wrapped = grpc.unary_stream_rpc_method_handler, unary_stream
    elif handler.stream_stream is not None:
        behavior = handler.stream_stream

        async def stream_stream(requests: AsyncIterator, context):
            try:
                seen = [checked(_header(context))]
            except BadNamespace as error:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))

            def qualified(request) -> str | None:
                try:
                    found = qualify_request(request, seen[0])
                except BadNamespace as error:
                    return str(error)
                seen[0] = seen[0] or found
                return None

            until_refused = UntilRefused(requests, qualified)
            async for answer in behavior(until_refused.stream(), context):
                yield unqualify_answer(answer, seen[0])
            if until_refused.refusal is not None:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, until_refused.refusal)

        make, wrapped = grpc.stream_stream_rpc_method_handler, stream_stream
    else:
        return handler
    return make(
        wrapped,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
