"""Every master election of a run, read from the nodes' logs, and which ones were
spurious: a master deposed while no fault had killed, stopped or cut it off.

The controller logs each election it makes (``routing/controller.py``)::

    2026-11-28 22:05:01,123 WARNING ferrymq.controller electing node-2 master of group-1
    (epoch 3 -> 4): master node-1 is down (missed its lease)

(one line), naming the master it replaces in its reason. An election is excused when a
fault that may depose a master (``chaos.nemesis.DEPOSING``) hit that master, from the
fault's start until ``margin_s`` after its end (the lease, for the controller to notice
and act). A fault that restarts the node (``chaos.nemesis.RESTARTS``) ends, for this, once
the cluster was ready again, not when the harness started the process: a node still
starting is not a live master (a chaos run deposed one 4.4 s after a power loss of every
node, before it had bound its replication port). Any other election deposed a live,
connected master: a busy CPU, a slow disk or nothing at all made the failure detector
take it for dead.
"""

from __future__ import annotations

import os
import re
import time

from chaos.history import Election, Fault

ELECTED = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) \S+ ferrymq\.controller electing (\S+) master "
    r"of (\S+) \(epoch (\d+) -> (\d+)\)(?: UNCLEAN)?: (.*)$"
)
DEPOSED = re.compile(r"master ([\w.-]+) is (?:down|not a member)|lost their link to ([\w.-]+)")


def elections_in_logs(directory: str, started_wall: float) -> list[Election]:
    """The elections logged in every ``*.log`` of ``directory``, oldest first (times in
    the logs are the host's local time, as ``time.time`` counts)."""
    found = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as f:
            for line in f:
                match = ELECTED.match(line.rstrip("\n"))
                if match is None:
                    continue
                stamp, millis, elected, _, _, epoch, reason = match.groups()
                wall = time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(millis) / 1000
                named = DEPOSED.search(reason)
                deposed = (named.group(1) or named.group(2)) if named else ""
                found.append(Election(wall - started_wall, elected, deposed, int(epoch), reason))
    return sorted(found, key=lambda e: e.at_s)


def judged(elections: list[Election], faults: list[Fault], margin_s: float) -> list[Election]:
    """``elections`` with ``spurious`` set on those no deposing fault excuses."""
    from chaos.nemesis import DEPOSING, RESTARTS

    def excused(election: Election) -> bool:
        for fault in faults:
            if fault.kind not in DEPOSING or election.deposed not in fault.targets:
                continue
            end = fault.end_s if fault.end_s is not None else float("inf")
            if fault.kind in RESTARTS and fault.ready_s is not None:
                end = max(end, fault.ready_s)
            if fault.start_s - 0.5 <= election.at_s <= end + margin_s:
                return True
        return False

    return [
        Election(e.at_s, e.elected, e.deposed, e.epoch, e.reason, spurious=not excused(e))
        for e in elections
    ]
