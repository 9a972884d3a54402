"""A send marked as a resend (``x-ferrymq-resend``: its first try's answer was lost, as
when a forwarding node's master died mid-call) is answered from what the log already holds
under the same topic and message ids, and stored only when it is not there: a failover
under a forwarded send stores nothing twice. (The forwarding node marks its tries after
a failed one: ``tests/node/test_forwarding.py``.)"""

from __future__ import annotations

import pytest

from ferrymq.codec.headers import RESEND
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb
from ferrymq.protocol.apache.rocketmq.v2 import service_pb2 as rpc
from tests.support.rpc import create_topic, message, pull, stubs


@pytest.fixture(scope="module")
def messaging(module_node):
    channel, messaging, admin = stubs(module_node.address)
    create_topic(admin, "resent", queues=1)
    create_topic(admin, "resent-other", queues=1)
    yield messaging
    channel.close()


def send(messaging, topic: str, message_ids: list[str], resend: bool = False):
    request = rpc.SendMessageRequest(messages=[message(topic, i.encode(), i) for i in message_ids])
    answer = messaging.SendMessage(request, metadata=[RESEND] if resend else None)
    assert answer.status.code == pb.OK, answer.status
    return [entry.offset for entry in answer.entries]


def stored(messaging, topic: str) -> list[bytes]:
    status, found, _ = pull(messaging, topic, 0, 0)
    assert status.code == pb.OK, status
    return [m.body for m in found]


def test_a_resend_of_a_stored_batch_is_answered_from_the_log_and_stored_once(messaging):
    assert send(messaging, "resent", ["R-1", "R-2"]) == [0, 1]
    assert send(messaging, "resent", ["R-1", "R-2"], resend=True) == [0, 1]
    assert stored(messaging, "resent") == [b"R-1", b"R-2"]
    # A resend of what never arrived is stored; a plain send again is (the client's own
    # retry, at least once).
    assert send(messaging, "resent", ["R-3"], resend=True) == [2]
    assert send(messaging, "resent", ["R-3"]) == [3]
    assert stored(messaging, "resent") == [b"R-1", b"R-2", b"R-3", b"R-3"]
    # The same id in another topic is another message.
    assert send(messaging, "resent-other", ["R-1"], resend=True) == [0]
    assert stored(messaging, "resent-other") == [b"R-1"]
