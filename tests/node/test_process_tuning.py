"""A node's own process keeps freed memory for its next request (``node/process_tuning.py``):
buffers of a few MiB taken and given back, as fetch answers and produce requests are, cost
no page faults once the heap has grown, where glibc's defaults fault every page again."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

from node.process_tuning import GC_THRESHOLDS

# Four 4 MiB buffers held at once, then freed: past glibc's adaptive trim threshold (twice
# the largest block it has seen mapped), so its defaults give the top of the heap back.
CHURN = textwrap.dedent(
    """
    import resource, sys
    if sys.argv[1] == "tuned":
        from node.process_tuning import tune_process
        tune_process()
    def rounds(n):
        for _ in range(n):
            held = [bytearray(4 << 20) for _ in range(4)]
            del held
    rounds(3)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    rounds(20)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """
)


def page_faults(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", CHURN, mode], capture_output=True, text=True, timeout=60, check=True
    )
    return int(done.stdout)


def test_a_tuned_process_reuses_freed_buffers_without_page_faults() -> None:
    if platform.libc_ver()[0] != "glibc":
        pytest.skip("the C library is not glibc: no mallopt")
    untuned, tuned = page_faults("plain"), page_faults("tuned")
    # 20 rounds of 16 MiB is 81,920 pages: the defaults fault nearly every one again.
    assert untuned > 10 * 4096, untuned
    assert tuned < 1000, tuned


def test_the_collector_thresholds_are_the_nodes() -> None:
    script = (
        "import gc; from node.process_tuning import tune_process; tune_process(); "
        "print(gc.get_threshold())"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == str(GC_THRESHOLDS)
