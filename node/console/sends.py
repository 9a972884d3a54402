"""The console's test message (a topic page's *Send a test message*, RocketMQ Dashboard's
"send message"): a topic, a body and optionally a tag, keys, a message group or a lite
topic, sent as the console's user through the send service a client's send goes through
(``node/services/send.py``: PUBLISH on the topic, the topic's type, the body's limits, the
queue are all its rules), at a master of one of the topic's broker groups
(``masters.py``). Kept apart from ``api.py``, which adds this route to its own.

The message declares its topic's type, so the service says what such a topic needs and
the form lacks (a FIFO topic's message group, a LITE topic's lite topic, a DELAY topic's
delivery time, a PRIORITY topic's priority); an untyped topic's is NORMAL, or FIFO with a
message group. A TRANSACTION topic's declares NORMAL, which the service refuses: a half
nobody commits is no test.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from ferrymq.codec.properties import (
    PROPERTY_KEYS,
    PROPERTY_LITE_TOPIC,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from node.admission import MESSAGE_TYPES
from node.console.masters import MasterReads
from node.message_rules import KEY_PATTERN, born_host_bytes
from node.rpc_status import AccessDenied, InvalidRequest, topic_error_status
from node.services.caller import Caller
from node.services.registry import Services
from node.services.send import OutgoingMessage
from node.topics import MessageType, TopicError

NAME = "([^/]+)"
BODY_CHARS_MAX = 256 * 1024  # the console's request bound; the node's body limit is the service's
KEYS_MAX = 32
FIELD_CHARS_MAX = 1024
# The send service's refusals (apache.rocketmq.v2 codes) as HTTP statuses; any other
# 4xx code is a 400, a 5xx one (no master, replication) a 503.
HTTP_OF_SEND_CODE = {
    pb.UNAUTHORIZED: 401,
    pb.FORBIDDEN: 403,
    pb.TOPIC_NOT_FOUND: 404,
    pb.MESSAGE_BODY_TOO_LARGE: 413,
}


class SendEndpoint:
    def __init__(
        self,
        services: Services,
        masters: MasterReads,
        text: Callable[[object, str, int], str],
        api_error: Callable[[int, str], Exception],
        refusal: Callable[[Exception], Exception],
    ) -> None:
        """``text``: the API's check of a string field; ``api_error(status, reason)``: an
        answer other than 200; ``refusal``: the API's answer to a service's refusal
        (``AccessDenied``: 401 or 403)."""
        self.services = services
        self.masters = masters
        self.text = text
        self.api_error = api_error
        self.refusal = refusal

    def routes(self) -> list[tuple[str, str, Callable]]:
        """(method, pattern after ``/api/``, handler)."""
        return [("POST", f"topics/{NAME}/messages", self.send)]

    async def send(self, caller: Caller, call) -> dict:
        """Body: ``body`` (text, sent as its UTF-8 bytes), ``tag``, ``keys`` (a list),
        ``message_group``, ``lite_topic`` (each optional). Answers where it was stored."""
        topic = call.params[0]
        message = self._message(caller, topic, call.json())
        try:
            sent = await self.masters.send(caller, topic, message)
        except AccessDenied as error:
            raise self.refusal(error) from None
        except (InvalidRequest, TopicError) as error:
            raise self._refused(error) from None
        return {
            "topic": topic,
            "message_id": sent.message_id,
            "broker_group": sent.broker_group,
            "node": sent.node_id,
            "queue_id": sent.queue_id,
            "queue_offset": sent.queue_offset,
        }

    def _message(self, caller: Caller, topic: str, body: dict) -> OutgoingMessage:
        """The form's message as a door reads one; a field of the wrong shape is a 400."""
        content = self.text(body.get("body", ""), "body", BODY_CHARS_MAX)
        properties = {PROPERTY_UNIQ_KEY: "FC" + uuid.uuid4().hex.upper()}
        tag = self._optional(body, "tag")
        if tag is not None:
            properties[PROPERTY_TAGS] = tag
        keys = body.get("keys") or []
        if not isinstance(keys, list) or len(keys) > KEYS_MAX:
            raise self.api_error(400, f"keys must be a list of at most {KEYS_MAX} keys")
        for key in keys:
            if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
                raise self.api_error(400, f"key {key!r} is not a string without spaces")
        if keys:
            properties[PROPERTY_KEYS] = " ".join(keys)
        # Each in the store's property too, as every door stores it (OutgoingMessage).
        group = self._optional(body, "message_group")
        if group is not None:
            properties[PROPERTY_MESSAGE_GROUP] = group
        lite_topic = self._optional(body, "lite_topic")
        if lite_topic is not None:
            properties[PROPERTY_LITE_TOPIC] = lite_topic
        return OutgoingMessage(
            content.encode(),
            properties,
            self._declared_type(topic, group),
            message_group=group,
            born_ms=time.time_ns() // 1_000_000,
            born_host=born_host_bytes(caller.address),
            lite_topic=lite_topic,
            stamp_type=True,
        )

    def _optional(self, body: dict, name: str) -> str | None:
        value = body.get(name)
        return None if value is None else self.text(value, name, FIELD_CHARS_MAX)

    def _declared_type(self, topic: str, message_group: str | None) -> int:
        route = self.services.admin.route(topic)
        kind = route.message_type if route is not None else MessageType.UNSPECIFIED
        if kind is MessageType.UNSPECIFIED:
            return pb.FIFO if message_group else pb.NORMAL
        if kind is MessageType.TRANSACTION:
            return pb.NORMAL  # refused by the send service, naming the topic's type
        return MESSAGE_TYPES[kind]

    def _refused(self, error: InvalidRequest | TopicError) -> Exception:
        """The service's refusal with its code's name in front (a ``TopicError`` names its
        reason already, and so does one a master's door passed on)."""
        if isinstance(error, TopicError):
            code, reason = topic_error_status(error).code, str(error)
        else:
            name = pb.Code.Name(error.code) if error.code in pb.Code.values() else error.code
            code, reason = error.code, str(error)
            if not reason.startswith(f"{name}: "):
                reason = f"{name}: {reason}"
        return self.api_error(HTTP_OF_SEND_CODE.get(code, 503 if code >= 50000 else 400), reason)
