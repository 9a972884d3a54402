"""How the SDK's blocking remoting channel names a failed call: the kernel ending the
connection is UNAVAILABLE (the node is avoided: ``Producer.failed``), only the call's own
timeout is DEADLINE_EXCEEDED. In the chaos runs the kernel's ETIMEDOUT was reported as a
deadline, so a client cut off from its master sent its next request down the same cut
path and writes stopped for the whole partition (4.5 s), not for the ~2 s the kernel takes.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from chaos.history import FAILED, UNKNOWN
from chaos.workload import outcome_of
from ferrymq.client import FerryError, Message, Producer
from ferrymq.client.errors import TRANSPORT
from ferrymq.client.remoting_channel import RemotingChannel, wait_readable
from ferrymq.codec.dead_peer import DEAD_LINK_S
from ferrymq.codec.remoting import (
    DEFAULT_MAX_FRAME_BYTES,
    FLAG_RESPONSE,
    FRAME_LENGTH,
    SERIALIZE_ROCKETMQ,
    RemotingCommand,
    encode,
)
from ferrymq.protocol.apache.rocketmq.v2 import definition_pb2 as pb

BIG_BODY = b"x" * (32 << 20)  # far more than a closed window and the send buffer hold


@contextlib.contextmanager
def silent_server(reads: bool) -> Iterator[str]:
    """A port that accepts and never answers; ``reads=False``: never reads either, so its
    receive window closes (its kernel still answers every probe, as a cut path does not)."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[socket.socket] = []
    done = threading.Event()

    def serve() -> None:
        connection, _ = server.accept()
        accepted.append(connection)
        while reads and not done.is_set():
            connection.settimeout(0.1)
            with contextlib.suppress(TimeoutError):
                if not connection.recv(1 << 16):
                    return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        done.set()
        thread.join(timeout=5)
        for connection in accepted:
            connection.close()
        server.close()


def test_a_connection_the_kernel_ends_is_unavailable_not_a_deadline():
    with silent_server(reads=False) as address:
        channel = RemotingChannel(address, timeout_s=10 * DEAD_LINK_S)
        started = time.monotonic()
        with pytest.raises(FerryError) as failed:
            channel.call(310, BIG_BODY)
        elapsed = time.monotonic() - started
    assert failed.value.code_name == "UNAVAILABLE", failed.value
    assert "timed out" in str(failed.value)
    assert elapsed < 5 * DEAD_LINK_S  # the kernel's limit, far before the call's own


def test_the_calls_own_timeout_is_a_deadline():
    with silent_server(reads=True) as address:
        channel = RemotingChannel(address, timeout_s=0.3)
        with pytest.raises(FerryError) as failed:
            channel.call(310, b"ping")
    assert failed.value.code_name == "DEADLINE_EXCEEDED", failed.value


def test_a_connection_never_opened_is_unsent_the_others_are_not():
    """A refused connection: the request never left, the node cannot have acted on it
    (``FerryError.unsent``: a send failed, its outcome is not unknown). A connection that
    died or timed out after the request left says nothing of it."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{closed.getsockname()[1]}"
    closed.close()  # nobody listens there now
    with pytest.raises(FerryError) as refused:
        RemotingChannel(address, timeout_s=1).call(310, b"ping")
    assert refused.value.code_name == "UNAVAILABLE" and refused.value.unsent
    with silent_server(reads=True) as silent, pytest.raises(FerryError) as late:
        RemotingChannel(silent, timeout_s=0.3).call(310, b"ping")
    assert late.value.code_name == "DEADLINE_EXCEEDED" and not late.value.unsent


def test_the_chaos_workload_counts_refusals_and_unsent_requests_as_failed():
    """What the chaos checker then holds to "nothing written" (``refused yet present``)."""
    busy = FerryError(pb.TOO_MANY_REQUESTS, "TOO_MANY_REQUESTS", "the in-sync set is behind")
    unsent = FerryError(TRANSPORT, "UNAVAILABLE", "connection refused", unsent=True)
    lost = FerryError(TRANSPORT, "UNAVAILABLE", "connection reset")
    late = FerryError(TRANSPORT, "DEADLINE_EXCEEDED", "no answer in 3 s")
    assert [outcome_of(e) for e in (busy, unsent, lost, late)] == [
        FAILED,
        FAILED,
        UNKNOWN,
        UNKNOWN,
    ]


def test_a_send_that_found_no_route_is_unsent():
    """Every node down (a restart of all of them): the route cannot be asked, so no send
    left; the chaos runs had counted all of these unknown."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{closed.getsockname()[1]}"
    closed.close()
    producer = Producer(address, max_attempts=1, timeout_s=1)
    with producer, pytest.raises(FerryError) as failed:
        producer.send(Message("anywhere", b"never sent"))
    assert failed.value.code == TRANSPORT and failed.value.unsent, failed.value


def test_a_buffered_frame_over_the_size_limit_fails_the_connection():
    """An answer followed, in the same segment, by a frame announcing more than the
    channel takes: reading what is buffered behind the answer (``read_frame`` then
    ``read_buffered``) raises the SDK's UNAVAILABLE and closes the connection, as a
    ``receive`` of it does, not the codec's own error."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    channel = RemotingChannel(f"127.0.0.1:{server.getsockname()[1]}", timeout_s=5)
    try:
        opaque = channel.send(310, b"ping")
        peer, _ = server.accept()
        with peer:
            answer = RemotingCommand(0, opaque, FLAG_RESPONSE, serialize_type=SERIALIZE_ROCKETMQ)
            peer.sendall(encode(answer) + FRAME_LENGTH.pack(DEFAULT_MAX_FRAME_BYTES + 1))
            assert wait_readable([channel], 5) == [channel]
            with pytest.raises(FerryError) as failed:
                channel.read_frame()
        assert failed.value.code_name == "UNAVAILABLE", failed.value
        assert channel.fileno() == -1  # closed: nothing after it is read
    finally:
        channel.close()
        server.close()
