"""gRPC metadata that ferrymq's own clients send beside the RocketMQ headers.

``x-ferrymq-queue: pinned`` on a SendMessage: every message goes to the queue its
``SystemProperties.queue_id`` names. Without it the node picks the queue, as Apache
RocketMQ's proxy does (docs/architecture.md, "Queue choice"): proto3 cannot tell an unset
``queue_id`` from queue 0, the official Python client leaves it unset, and the others fill
in the route's queue they happened to pick, so the field says nothing a node should obey.
The SDK, the Spark sink and the tools that place messages on purpose send this header.

``x-ferrymq-resend: 1`` on a SendMessage: the messages may be stored already (an earlier
try's answer was lost); the master answers those it holds under the same topic and
message id from the log instead of storing them again. A node that forwards a send sets
it when it sends again after the master it tried died mid-call (``node/grpc/forwarding.py``).

``x-ferrymq-answer-queues: 1`` on a SendMessage: the answer's trailing metadata names the
queue each stored message went to (``x-ferrymq-queues: 3``, one id per entry, separated
by commas), which ``SendResultEntry`` has no field for. A node that hands a console's test
message to a master asks for it (``node/services/peer_admin.py``); nobody else pays for it.
"""

from __future__ import annotations

PINNED_QUEUE_HEADER = "x-ferrymq-queue"
PINNED_QUEUE_VALUE = "pinned"
PINNED_QUEUE = (PINNED_QUEUE_HEADER, PINNED_QUEUE_VALUE)
RESEND_HEADER = "x-ferrymq-resend"
RESEND_VALUE = "1"
RESEND = (RESEND_HEADER, RESEND_VALUE)
ANSWER_QUEUES_HEADER = "x-ferrymq-answer-queues"
ANSWER_QUEUES = (ANSWER_QUEUES_HEADER, "1")
QUEUES_TRAILER = "x-ferrymq-queues"
