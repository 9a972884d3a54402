"""gRPC metadata that ferrymq's own clients send beside the RocketMQ headers.

``x-ferrymq-queue: pinned`` on a SendMessage: every message goes to the queue its
``SystemProperties.queue_id`` names. Without it the node picks the queue, as Apache
RocketMQ's proxy does (docs/architecture.md, "Queue choice"): proto3 cannot tell an unset
``queue_id`` from queue 0, the official Python client leaves it unset, and the others fill
in the route's queue they happened to pick, so the field says nothing a node should obey.
The SDK, the Spark sink and the tools that place messages on purpose send this header.
"""

from __future__ import annotations

PINNED_QUEUE_HEADER = "x-ferrymq-queue"
PINNED_QUEUE_VALUE = "pinned"
PINNED_QUEUE = (PINNED_QUEUE_HEADER, PINNED_QUEUE_VALUE)
