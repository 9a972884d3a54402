"""The Java load drivers' step accounting (``bench/java/LoadSteps.java``): every receipt
counts in exactly one step's event, however the consumer's receipts and a step's end
interleave. A receipt counted between a step's event's reads, or after its event and
before the next step began, was in none: ``bench.saturation``'s Kafka smoke run once found
its steps' receipts 500 short of the acknowledged sends with no backlog left."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

from bench.load_driver import SOURCES
from bench.peers import jvm

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "LoadStepsCheck.java")


def test_every_receipt_counts_in_exactly_one_step(tmp_path):
    java = jvm.find_java()
    javac = shutil.which("javac") or os.path.join(os.path.dirname(java), "javac")
    classes = tmp_path / "classes"
    subprocess.run(
        [javac, "-nowarn", "-d", str(classes), os.path.join(SOURCES, "LoadSteps.java"), CHECK],
        check=True,
        timeout=120,
    )
    receipts = 3_000_000
    done = subprocess.run(
        [java, "-cp", str(classes), "LoadStepsCheck", str(receipts), "20000"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["total"] == receipts
    assert figures["counted"] == receipts, figures  # none lost between two steps
    assert figures["steps"] > 20_000  # steps ended while the receipts came
