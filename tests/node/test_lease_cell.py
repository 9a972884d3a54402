"""The lease cell (``node/lease_cell.py``): a renewal the routing host writes is what the
node reads, at once and whole, across processes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

from node.lease_cell import LeaseCell
from node.wakeups import watch_wakeups

WRITER = """
import sys
from node.lease_cell import LeaseCell
from node.wakeups import watch_wakeups
cell = LeaseCell(int(sys.argv[1]))
for i in range(1, 2_000_001):
    cell.renew(float(i))
"""


def test_a_new_cell_holds_its_first_renewal_and_the_last_one():
    cell = LeaseCell(renewed_at=12.5)
    assert cell.renewed_at == 12.5
    cell.renew(13.25)
    assert cell.renewed_at == 13.25
    cell.close()


def test_the_host_marks_itself_starved_beside_the_renewal():
    """The routing host's starvation mark (its wakeups came late) is a field of its own:
    it leaves the renewal as it was."""
    cell = LeaseCell(renewed_at=5.0)
    assert cell.starved_until == 0.0
    cell.mark_starved(9.5)
    assert (cell.renewed_at, cell.starved_until) == (5.0, 9.5)
    cell.renew(6.0)
    assert (cell.renewed_at, cell.starved_until) == (6.0, 9.5)
    cell.close()


def test_what_another_process_renews_is_read_whole():
    cell = LeaseCell(renewed_at=0.0)
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(cell.fd)], pass_fds=(cell.fd,))
    seen = []
    while writer.poll() is None:
        seen.append(cell.renewed_at)
    assert writer.wait() == 0
    assert cell.renewed_at == 2_000_000.0
    # Every value read was one renewal, whole, and they never went back.
    assert all(value == int(value) for value in seen)
    assert seen == sorted(seen)
    cell.close()


def test_a_host_whose_wakeups_come_late_marks_itself_starved():
    """``watch_wakeups``: a wakeup held up (here the loop itself is blocked 0.3 s, as a
    starved host's is) marks the cell for the hold that follows."""
    cell = LeaseCell(renewed_at=0.0)

    async def run() -> float:
        watcher = asyncio.ensure_future(watch_wakeups(cell.mark_starved, hold_s=6.0))
        await asyncio.sleep(0.1)
        blocked_at = time.monotonic()
        time.sleep(0.3)  # the loop does not run: the probe's sleep ends late
        await asyncio.sleep(0.1)
        watcher.cancel()
        assert cell.starved_until >= blocked_at + 0.3 + 6.0
        return cell.starved_until

    asyncio.run(run())
    cell.close()
