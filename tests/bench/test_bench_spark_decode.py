"""``python -m bench.spark_decode --json --smoke`` runs end to end and its figures are
sane: the C walk costs less per row than its Python twin."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import ROOT


def test_smoke_run_prints_the_decode_figures():
    done = subprocess.run(
        [sys.executable, "-m", "bench.spark_decode", "--json", "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["rows_per_answer"] == 100
    assert 0 < figures["decode_batch_cpu_us_per_row"] < figures["python_twin_cpu_us_per_row"]
