"""The lease cell (``node/lease_cell.py``): a renewal the routing host writes is what the
node reads, at once and whole, across processes."""

from __future__ import annotations

import subprocess
import sys

from node.lease_cell import LeaseCell

WRITER = """
import sys
from node.lease_cell import LeaseCell
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
