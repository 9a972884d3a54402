"""A stopping process says nothing of a signal that arrives while it ends
(``node/stop_signals.py``). A chaos run found a routing host that printed "Exception
ignored when trying to write to the signal wakeup fd": the node's SIGTERM reached it while
its loop was closing. Each case runs in a process of its own, and the signal is sent at
the instruction the race needs: after the loop closed its wakeup fd, before it removed
its handlers."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from ferrymq.launcher.node_process import PACKAGE_ROOT

# A process shaped as the routing host and the node are: it waits for its stop signal
# under ``stop_on``, ends its loop, and lives on a little (the host's os._exit, the
# node's last line). SIGTERM arrives three times: to stop it, at the worst instruction of
# the loop's close, and after the loop ended.
ENDING_PROCESS = textwrap.dedent(
    """
    import asyncio, os, signal
    from asyncio import selector_events
    from node.stop_signals import stop_on

    close_self_pipe = selector_events.BaseSelectorEventLoop._close_self_pipe

    def close_then_signal(loop):
        close_self_pipe(loop)  # the wakeup fd is closed; asyncio's handler is still set
        os.kill(os.getpid(), signal.SIGTERM)

    selector_events.BaseSelectorEventLoop._close_self_pipe = close_then_signal

    async def main():
        stopping = asyncio.Event()
        with stop_on((signal.SIGTERM, signal.SIGINT), stopping.set):
            os.kill(os.getpid(), signal.SIGTERM)
            await stopping.wait()

    asyncio.run(main())
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGINT)
    print("ended in order", flush=True)
    """
)


def test_a_signal_while_the_loop_closes_is_ignored_without_a_word():
    """The routing host's loop (asyncio's own). The node's, uvloop's, keeps its handler
    through its close; ``stop_on`` ignores the signals there all the same."""
    ended = subprocess.run(
        [sys.executable, "-c", ENDING_PROCESS],
        cwd=PACKAGE_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ended.stderr == ""
    assert (ended.returncode, ended.stdout) == (0, "ended in order\n")
