"""A short, fixed round of each native parser's fuzz target (tests/support/native_fuzz.py): the
C function and its twin on a few thousand inputs the fuzzer derives from well-formed
seeds. ``make fuzz`` runs the same targets for longer, with random seeds and the C built
with AddressSanitizer and UndefinedBehaviorSanitizer."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import native_fuzz
from tests.support.native_fuzz import TARGETS, seeds

RUNS = 3000


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_short_fuzz_round_finds_c_and_twin_agreeing(target, tmp_path):
    corpus = tmp_path / "corpus"
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.native_fuzz",
            target,
            str(corpus),
            f"-runs={RUNS}",
            "-seed=1",
            f"-artifact_prefix={tmp_path}/",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert f"Done {RUNS} runs" in finished.stderr
    assert len(list(corpus.iterdir())) >= len(seeds(target))  # the seeds, and what it kept


def test_a_fuzz_target_fails_when_c_and_twin_disagree(tmp_path, monkeypatch):
    """The harness can fail: a twin that answers differently is caught on a seed."""
    monkeypatch.setattr(native_fuzz, "chunk_problem_in_python", lambda data: "never whole")
    with pytest.raises(AssertionError):
        native_fuzz.fuzz_chunk_is_whole(seeds("chunk_is_whole")[0])
