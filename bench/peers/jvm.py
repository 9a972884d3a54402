"""Java and the Maven Central artifacts of the JVM peers (Apache RocketMQ, Apache Kafka).

A peer names its artifacts; ``resolve`` writes a pom listing them into the benchmark's
cache directory and has Maven copy them with every dependency into ``lib/`` there, once
(a stamp records what was copied). Nothing is committed or installed system-wide. When
Java, Maven or an artifact is missing, ``JvmUnavailable`` says so in one line, which the
run reports as the peer's reason for not being measured.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

CACHE = os.environ.get(
    "FERRYMQ_BENCH_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "ferrymq-bench")
)
RESOLVE_TIMEOUT_S = 900.0
STAMP = "resolved.txt"


class JvmUnavailable(RuntimeError):
    """Java, Maven or an artifact is missing: the message is the one line to show."""


@dataclass(frozen=True)
class Artifact:
    group: str
    artifact: str
    version: str

    @property
    def coordinate(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


def find_java() -> str:
    """The ``java`` on PATH (17 or later), or ``JvmUnavailable``."""
    java = shutil.which("java")
    if java is None:
        raise JvmUnavailable("java not found on PATH (the JVM peers need Java 17)")
    return java


def pom(name: str, artifacts: Sequence[Artifact]) -> str:
    """A pom whose only purpose is to list ``artifacts`` for dependency:copy-dependencies."""
    dependencies = "".join(
        f"<dependency><groupId>{a.group}</groupId><artifactId>{a.artifact}</artifactId>"
        f"<version>{a.version}</version></dependency>\n"
        for a in artifacts
    )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "<modelVersion>4.0.0</modelVersion>\n"
        f"<groupId>ferrymq.bench</groupId><artifactId>{name}</artifactId>"
        "<version>0</version>\n"
        f"<dependencies>\n{dependencies}</dependencies>\n</project>\n"
    )


def _failure_line(output: str) -> str:
    """Maven's first ``[ERROR]`` line, which names the artifact it could not get."""
    for line in output.splitlines():
        if line.startswith("[ERROR]") and line[7:].strip():
            return line[7:].strip()
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def resolve(name: str, artifacts: Sequence[Artifact], cache: str = CACHE) -> str:
    """The directory holding ``artifacts`` and their dependencies as jars, downloaded from
    Maven Central into ``cache/name`` the first time; ``JvmUnavailable`` in one line when
    Maven is missing or an artifact cannot be had."""
    directory = os.path.join(cache, name)
    lib = os.path.join(directory, "lib")
    wanted = "\n".join(a.coordinate for a in artifacts) + "\n"
    stamp = os.path.join(directory, STAMP)
    try:
        with open(stamp, encoding="utf-8") as f:
            if f.read() == wanted:
                return lib
    except FileNotFoundError:
        pass
    mvn = shutil.which("mvn")
    coordinates = ", ".join(a.coordinate for a in artifacts)
    if mvn is None:
        raise JvmUnavailable(f"mvn not found on PATH: cannot fetch {coordinates}")
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "pom.xml"), "w", encoding="utf-8") as f:
        f.write(pom(name, artifacts))
    shutil.rmtree(lib, ignore_errors=True)
    argv = [mvn, "-B", "-q", "dependency:copy-dependencies", f"-DoutputDirectory={lib}"]
    try:
        done = subprocess.run(
            argv, cwd=directory, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise JvmUnavailable(
            f"{coordinates} not fetched within {RESOLVE_TIMEOUT_S:.0f} s"
        ) from None
    if done.returncode != 0:
        raise JvmUnavailable(
            f"{coordinates} not resolved from Maven Central: "
            + _failure_line(done.stdout + done.stderr)
        )
    with open(stamp, "w", encoding="utf-8") as f:
        f.write(wanted)
    return lib


def java_argv(
    java: str,
    lib: str,
    main: str,
    heap_mb: int,
    arguments: Sequence[str] = (),
    properties: dict[str, str] | None = None,
) -> list[str]:
    """``java`` with a fixed small heap, the jars of ``lib`` and the system properties."""
    return [
        java,
        f"-Xms{heap_mb}m",
        f"-Xmx{heap_mb}m",
        "-XX:+UseG1GC",
        "-XX:MaxDirectMemorySize=512m",
        # Serialisers in the RocketMQ controller reflect into java.base (Java 17 refuses).
        "--add-opens=java.base/java.lang=ALL-UNNAMED",
        "--add-opens=java.base/java.nio=ALL-UNNAMED",
        "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
        *(f"-D{key}={value}" for key, value in (properties or {}).items()),
        "-cp",
        os.path.join(lib, "*"),
        main,
        *arguments,
    ]
