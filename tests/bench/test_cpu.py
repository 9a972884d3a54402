"""The benchmarks' CPU of other processes (bench/cpu.py) is read to the nanosecond, not in
clock ticks: a no-op slave's few ms over a short measure read 0 from /proc/<pid>/stat
(tests/bench/test_bench_java_ceiling.py failed so on Debian's faster interpreter)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.cpu import process_cpu_s

# A child that works ~23 ms of CPU, says how much CPU it has used, and waits.
WORKER = """
import sys, time
started = time.process_time()
while time.process_time() - started < 0.023:
    pass
print(time.process_time(), flush=True)
sys.stdin.readline()
"""


def test_another_process_s_cpu_is_read_as_it_reads_its_own():
    # Three children: a clock-tick reading lands within 0.5 ms of one by chance ~1 in 10.
    for _ in range(3):
        child = subprocess.Popen(
            [sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            own = float(child.stdout.readline())
            assert process_cpu_s(child.pid) == pytest.approx(own, abs=0.0005)
        finally:
            child.communicate("\n", timeout=30)


def test_a_process_that_is_gone_raises_os_error():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    with pytest.raises(OSError):
        process_cpu_s(child.pid)
