"""The signals that stop a process running an asyncio loop (a node, its routing host), and
why one that arrives once the stop has begun is ignored.

asyncio's signal handlers write to the loop's wakeup fd, and ``loop.close()`` closes that
fd before it removes the handlers: a signal in between makes CPython print "Exception
ignored when trying to write to the signal wakeup fd: ... Bad file descriptor". A routing
host met exactly that: the node closed their channel, the host began to end, and the
node's SIGTERM arrived while the host's loop was closing (a chaos run reads such a line
as a node failure). So the handlers go while the loop still runs, and the signals are
ignored from then on: the stop is under way already, and SIGKILL still ends a stop that
hangs."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterable, Iterator


@contextlib.contextmanager
def stop_on(signums: Iterable[int], stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` on the running loop when one of ``signums`` arrives, until the block
    ends; after it, those signals are ignored for the rest of the process's life."""
    signums = tuple(signums)
    loop = asyncio.get_running_loop()
    for signum in signums:
        loop.add_signal_handler(signum, stop)
    try:
        yield
    finally:
        for signum in signums:
            # Removing the handler restores the default action; a signal in the instant
            # before SIG_IGN ends the process as that signal would: as it was asked to.
            loop.remove_signal_handler(signum)
            signal.signal(signum, signal.SIG_IGN)
