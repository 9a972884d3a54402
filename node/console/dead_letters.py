"""The console's endpoints of a group's dead letters: a page of its dead-letter queue on a
broker group, and their resend (``node/services/dead_letter_resend.py``, the service every
door calls: who may, the checks and the hand-over to the broker group's master are its).
Kept apart from ``api.py``, which adds these routes to its own.

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from node.services.caller import Caller
from node.services.dead_letter_resend import (
    LIST_MAX,
    RESEND_MAX,
    DeadLetterResendService,
    ResendRequest,
)

NAME = "([^/]+)"


class DeadLetterEndpoints:
    def __init__(
        self,
        service: DeadLetterResendService,
        integer: Callable[[object, str, int, int], int],
        text: Callable[[object, str, int], str],
        bad_request: Callable[[str], Exception],
    ) -> None:
        """``integer`` and ``text``: the API's checks of a field (``api.py``), which
        refuse bad input with a precise 400, as ``bad_request(reason)`` does."""
        self.service = service
        self.integer = integer
        self.text = text
        self.bad_request = bad_request

    def routes(self) -> list[tuple[str, str, Callable]]:
        """(method, pattern after ``/api/``, handler)."""
        return [
            ("GET", f"groups/{NAME}/dead-letters", self.page),
            ("POST", f"groups/{NAME}/dead-letters/resend", self.resend),
        ]

    async def page(self, caller: Caller, call) -> dict:
        """``?broker_group=`` ("": this node's), ``from=`` (-1: the last ones), ``limit=``."""
        query = call.query
        broker_group = self.text(query.get("broker_group", ""), "broker_group", 255)
        start = self.integer(query.get("from", "-1"), "from", -1, 2**63 - 1)
        limit = self.integer(query.get("limit", "50"), "limit", 1, LIST_MAX)
        page = await self.service.page(caller, call.params[0], broker_group, start, limit)
        return {
            "group": call.params[0],
            "broker_group": page.broker_group,
            "min_offset": page.min_offset,
            "max_offset": page.max_offset,
            "entries": [dataclasses.asdict(entry) for entry in page.entries],
        }

    async def resend(self, caller: Caller, call) -> dict:
        """Body: ``broker_group`` and either ``offsets`` (a list) or ``from_offset`` and
        ``to_offset`` (inclusive); at most ``RESEND_MAX`` a call (the page sends a long
        range in parts, showing its progress)."""
        body = call.json()
        broker_group = self.text(body.get("broker_group", ""), "broker_group", 255)
        offsets = body.get("offsets", [])
        if not isinstance(offsets, list) or len(offsets) > RESEND_MAX:
            raise self.bad_request(f"offsets must be a list of at most {RESEND_MAX} offsets")
        chosen = tuple(self.integer(o, "offsets", 0, 2**63 - 1) for o in offsets)
        first = self.integer(body.get("from_offset", -1), "from_offset", -1, 2**63 - 1)
        last = self.integer(body.get("to_offset", -1), "to_offset", -1, 2**63 - 1)
        request = ResendRequest(call.params[0], broker_group, chosen, first, last)
        outcome = await self.service.resend(caller, request)
        return {
            "group": request.group,
            "broker_group": outcome.broker_group,
            "resent": list(outcome.resent),
            "already_resent": list(outcome.already_resent),
            "not_yet": list(outcome.not_yet),
        }
