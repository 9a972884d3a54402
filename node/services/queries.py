"""Message lookups, through every door: Admin QueryMessageById / ByKey / ByOffset, 4.x
QUERY_MESSAGE and VIEW_MESSAGE_BY_ID.

Who may see a record: SUBSCRIBE on the topic it is stored in. A caller who names a topic
is decided on that name and gets only records stored in it (an id of another topic's
record answers as an id of nothing); a caller who names only a position (an offset
message id) is decided on the topic of the record found there, read from the record
itself, never from the request. A position is no secret (every answer
shows them), so a lookup answers only a real record (``look_message_by_offset``: one that
starts there, that its consume queue vouches for, whose checks pass), and a transaction
half or a delayed message waiting in its system topic is not its real topic's message
until it is committed or due (system topics are admins' only, ``routing/acl.py``).

Thread-safety: owned by the node's event loop.
"""

from __future__ import annotations

from ferrymq.codec.commitlog_record import StoredMessage
from ha.replicated_store import ReplicatedStore
from node.services.caller import Caller
from node.services.permissions import Permissions, read

NO_TIME = 1 << 62
QUERY_MAX_MESSAGES = 64  # RocketMQ's defaultQueryMaxNum


class QueryService:
    def __init__(self, store: ReplicatedStore, permissions: Permissions) -> None:
        self.store = store
        self.permissions = permissions

    def at_position(
        self, caller: Caller, physical_offset: int, topic: str = ""
    ) -> StoredMessage | None:
        """The record that starts at ``physical_offset``, if the caller may see it (and
        it is stored in ``topic`` when one is named)."""
        if topic:
            self.permissions.require(caller, read(topic))
        found = self.store.look_message_by_offset(physical_offset) if physical_offset >= 0 else None
        return self._seen(caller, found, topic)

    def by_id(self, caller: Caller, message_id: str, topic: str = "") -> StoredMessage | None:
        """The record an offset message id names, or (a topic named) the one whose unique
        key ``message_id`` is."""
        if topic:
            self.permissions.require(caller, read(topic))
        found = self._seen(caller, self.store.look_message_by_id(message_id), topic)
        if found is None and topic:
            found = self.store.query_by_unique_key(topic, message_id)
        return found

    def _seen(
        self, caller: Caller, found: StoredMessage | None, topic: str
    ) -> StoredMessage | None:
        if found is None or topic:
            return found if found is not None and found.topic == topic else None
        self.permissions.require(caller, read(found.topic))
        return found

    def by_key(
        self,
        caller: Caller,
        topic: str,
        key: str,
        max_count: int = 32,
        begin_ms: int = 0,
        end_ms: int = NO_TIME,
    ) -> list[StoredMessage]:
        """Up to ``max_count`` (at most ``QUERY_MAX_MESSAGES``) records of ``topic`` with
        ``key`` among their keys, stored between the two times."""
        self.permissions.require(caller, read(topic))
        wanted = min(max(max_count, 1), QUERY_MAX_MESSAGES)
        return self.store.query_by_key(topic, key, wanted, begin_ms, end_ms or NO_TIME)

    def by_unique_key(self, caller: Caller, topic: str, key: str) -> StoredMessage | None:
        self.permissions.require(caller, read(topic))
        return self.store.query_by_unique_key(topic, key)

    def at_queue_offset(
        self, caller: Caller, topic: str, queue_id: int, offset: int
    ) -> StoredMessage | None:
        self.permissions.require(caller, read(topic))
        page = self.store.get_messages(topic, queue_id, offset, 1)
        return next((m for m in page.messages if m.queue_offset == offset), None)
