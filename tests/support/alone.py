"""Which test files ``make test`` runs alone, and why each (``tests/conftest.py`` marks
them ``alone``).

make test runs the suite on two workers (pytest-xdist, a file per worker at a time), then
these files by themselves (``-m alone``): they load the host on purpose, and their bounds
(a chaos run's, a busy node's lease) assume no other load than theirs; or they make and
remove network namespaces, during which another process's look at the host's interfaces
can fail (a JVM's ``NetworkInterface`` enumeration: "No such device (getFlags()
failed)", which the official Java clients' start turns into a NullPointerException:
mqadmin's, once in a clean run; ``tests/architecture/test_namespaces_run_alone.py``). The
benchmarks' smoke runs check that figures are there and sane, not how fast: they run on
a worker.
"""

from __future__ import annotations

NAMESPACES = "makes and removes network namespaces: other processes' interface lists fail"
ALONE = {
    "tests/chaos/test_chaos_run.py": "chaos runs with overload faults; their checker's bounds",
    "tests/chaos/test_chaos_overload.py": "starves and throttles processes with cgroups",
    "tests/cluster/test_liveness.py": "busy nodes keep their lease: the host's load is the test",
    "tests/chaos/test_chaos_network.py": NAMESPACES,
    "tests/chaos/test_isolated_master.py": NAMESPACES,
    "tests/ha/test_dead_link.py": f"{NAMESPACES}; and its bounds are the kernel's times",
}
