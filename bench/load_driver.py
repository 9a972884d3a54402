"""The Java programs of the benchmarks (``bench/java/``), on the official Java clients:
``LoadDriver``, the open-loop load of ``bench.saturation``, and ``PeerWorkloads``, the five
workloads of ``bench.peers``, on the 4.x client (rocketmq-client 5.1.4, the OpenMessaging
Benchmark's RocketMQ driver, over remoting); ``PeerWorkloadsGrpc``, the same five on the
5.x client (rocketmq-client-java, over gRPC); ``KafkaLoadDriver``, the same open-loop load
on Apache Kafka's Java client (both load drivers are ``LoadSteps``' steps around their
client). Each client is resolved from Maven Central into the benchmarks' cache
(``bench.peers.jvm``); each program is compiled there the first time its sources change."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess

from bench.peers import jvm

CLIENT = jvm.Artifact("org.apache.rocketmq", "rocketmq-client", "5.1.4")
GRPC_CLIENT = jvm.Artifact("org.apache.rocketmq", "rocketmq-client-java", "5.2.0")
# The client of the Kafka broker bench.peers runs (kafka_kraft.ARTIFACTS), its own version.
KAFKA_CLIENT = jvm.Artifact("org.apache.kafka", "kafka-clients", "4.1.1")
SOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java")
HEAP_MB = 1024


def program(
    name: str,
    heap_mb: int = HEAP_MB,
    client: jvm.Artifact = CLIENT,
    companions: tuple[str, ...] = (),
) -> list[str]:
    """The command that runs ``bench/java/<name>.java``'s class on ``client`` (its arguments
    follow: see the Java source), compiled with the classes of ``companions`` (names in
    ``bench/java/`` too); ``JvmUnavailable`` when Java, the client or the compile fails."""
    java = jvm.find_java()
    lib = jvm.resolve("load-driver" if client == CLIENT else client.artifact, [client])
    sources = [os.path.join(SOURCES, f"{each}.java") for each in (name, *companions)]
    hasher = hashlib.sha256(lib.encode())
    for source in sources:
        with open(source, "rb") as f:
            hasher.update(f.read())
    digest = hasher.hexdigest()[:16]
    classes = os.path.join(jvm.CACHE, f"{name}-classes-{digest}")
    if not os.path.exists(os.path.join(classes, f"{name}.class")):
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
                *sources,
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise jvm.JvmUnavailable(f"javac of {name} failed: {done.stderr[-500:]}")
        shutil.rmtree(classes, ignore_errors=True)
        os.rename(work, classes)
    return [
        java,
        f"-Xms{heap_mb}m",
        f"-Xmx{heap_mb}m",
        "-XX:+UseParallelGC",
        "-cp",
        f"{classes}:{os.path.join(lib, '*')}",
        name,
    ]


def argv() -> list[str]:
    """The command that runs the load driver of ``bench.saturation``."""
    return program("LoadDriver", companions=("LoadSteps",))


def kafka_argv() -> list[str]:
    """The command that runs ``bench.saturation``'s load driver on Kafka's client."""
    return program("KafkaLoadDriver", client=KAFKA_CLIENT, companions=("LoadSteps",))
