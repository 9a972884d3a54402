"""The Java load driver of ``bench.saturation`` (``bench/java/LoadDriver.java``): the
OpenMessaging Benchmark's RocketMQ client (rocketmq-client 5.1.4, its 4.x API over
remoting), resolved from Maven Central into the benchmarks' cache (``bench.peers.jvm``)
and compiled there the first time its source changes."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess

from bench.peers import jvm

CLIENT = jvm.Artifact("org.apache.rocketmq", "rocketmq-client", "5.1.4")
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java", "LoadDriver.java")
HEAP_MB = 1024


def argv() -> list[str]:
    """The command that runs the driver (its arguments follow: see the Java source)."""
    java = jvm.find_java()
    lib = jvm.resolve("load-driver", [CLIENT])
    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read() + lib.encode()).hexdigest()[:16]
    classes = os.path.join(jvm.CACHE, f"load-driver-classes-{digest}")
    if not os.path.exists(os.path.join(classes, "LoadDriver.class")):
        javac = shutil.which("javac") or os.path.join(os.path.dirname(java), "javac")
        work = classes + ".partial"
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        done = subprocess.run(
            [
                javac,
                "-nowarn",
                "--release",
                "11",
                "-cp",
                os.path.join(lib, "*"),
                "-d",
                work,
                SOURCE,
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise jvm.JvmUnavailable(f"javac of the load driver failed: {done.stderr[-500:]}")
        shutil.rmtree(classes, ignore_errors=True)
        os.rename(work, classes)
    return [
        java,
        f"-Xms{HEAP_MB}m",
        f"-Xmx{HEAP_MB}m",
        "-XX:+UseParallelGC",
        "-cp",
        f"{classes}:{os.path.join(lib, '*')}",
        "LoadDriver",
    ]
