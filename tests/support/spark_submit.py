"""The test's end of ``spark_driver_program``: submits it with ``spark-submit`` to a
``StandaloneCluster`` and runs its steps over a loopback connection.

One application serves a whole test module: its driver and executors start once (~20 s
here, and the first Python worker of each executor ~10 s more). The program dials back to
a port the OS picked and proves it is the one submitted with a token from its environment.
Not thread-safe: one test at a time drives it.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.support import spark_driver_program as program
from tests.support.spark_standalone import (
    EXECUTOR_MEMORY,
    JAVA_OPTIONS,
    StandaloneCluster,
    kill_tree,
    spark_env,
    spark_home,
)

SUBMIT_TIMEOUT_S = 120  # spark-submit, the driver's JVM and both executors registered


def submit_conf(cluster: StandaloneCluster) -> dict[str, str]:
    """An executor on each worker (one core each), and no job before both registered:
    otherwise the first job could run whole on the first executor to come up."""
    workers = len(cluster.workers)
    return {
        "spark.executor.cores": "1",
        "spark.executor.memory": EXECUTOR_MEMORY,
        "spark.executor.extraJavaOptions": JAVA_OPTIONS,
        "spark.cores.max": str(workers),
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": f"{SUBMIT_TIMEOUT_S}s",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": "768m",
        "spark.ui.enabled": "false",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.sql.shuffle.partitions": "2",
    }


def submit_argv(cluster: StandaloneCluster) -> list[str]:
    """spark-submit and its options, up to the program's path."""
    argv = [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.master_url]
    argv += ["--driver-java-options", JAVA_OPTIONS]  # the driver is spark-submit's JVM
    for key, value in submit_conf(cluster).items():
        argv += ["--conf", f"{key}={value}"]
    return argv


def _start(argv: list[str], env: dict[str, str], root: Path, log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=root,
            start_new_session=True,  # its JVM, Python driver and planners: one group
        )


class StepFailed(AssertionError):
    pass


class RemoteDriver:
    def __init__(self, process: subprocess.Popen, control: socket.socket, log: Path) -> None:
        self.process = process
        self.control = control
        self.log = log
        self.app_id = ""
        self.program_pid = 0  # the Python driver program (a child of spark-submit's JVM)
        self._buffer = bytearray()

    @classmethod
    def submit(cls, cluster: StandaloneCluster, root: Path) -> RemoteDriver:
        listener = socket.create_server(("127.0.0.1", 0))
        token = secrets.token_hex(16)
        port = listener.getsockname()[1]
        argv = [*submit_argv(cluster), program.__file__, f"127.0.0.1:{port}"]
        log = root / "driver.log"
        process = _start(argv, {**spark_env(cluster.root), program.TOKEN_ENV: token}, root, log)
        driver = None
        try:
            cluster.wait_for_workers()  # while the driver's JVM starts
            control = cls._accept(listener, process, log)
            driver = cls(process, control, log)
            hello = driver._answer(time.monotonic() + SUBMIT_TIMEOUT_S)
            if hello.get("token") != token:
                raise StepFailed(f"another program dialled the driver's control port: {hello}")
            driver.app_id, driver.program_pid = hello["app_id"], hello["pid"]
            return driver
        except BaseException:
            if driver is not None:
                driver.control.close()
            kill_tree(process)
            raise
        finally:
            listener.close()

    @staticmethod
    def _accept(listener: socket.socket, process: subprocess.Popen, log: Path) -> socket.socket:
        deadline = time.monotonic() + SUBMIT_TIMEOUT_S
        listener.settimeout(0.5)
        while True:
            try:
                control, _ = listener.accept()
                return control
            except TimeoutError:
                if process.poll() is not None:
                    raise StepFailed(
                        f"spark-submit exited ({process.returncode}):\n{_tail(log)}"
                    ) from None
                if time.monotonic() > deadline:
                    raise StepFailed(
                        f"the driver did not dial back in {SUBMIT_TIMEOUT_S} s:\n{_tail(log)}"
                    ) from None

    def send(self, step: str, **args) -> None:
        """Start ``step`` on the driver; ``result`` waits for its answer."""
        self.control.sendall(json.dumps({"step": step, "args": args}).encode() + b"\n")

    def result(self, timeout_s: float):
        answer = self._answer(time.monotonic() + timeout_s)
        if "error" in answer:
            raise StepFailed(f"the driver's step failed:\n{answer['error']}")
        return answer["result"]

    def call(self, step: str, timeout_s: float, **args):
        self.send(step, **args)
        return self.result(timeout_s)

    def _answer(self, deadline: float) -> dict:
        self.control.settimeout(0.5)
        while b"\n" not in self._buffer:
            try:
                received = self.control.recv(1 << 16)
            except TimeoutError:
                received = None
            if received:
                self._buffer += received
                continue
            if received == b"" or self.process.poll() is not None:
                raise StepFailed(f"the driver went away:\n{_tail(self.log)}")
            if time.monotonic() > deadline:
                raise StepFailed(f"no answer from the driver in time:\n{_tail(self.log)}")
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        return json.loads(line)

    def close(self) -> None:
        """The driver, its JVM and its Python processes, at once: the executors then lose
        their driver and exit, and the cluster's ``close`` kills what is left."""
        self.control.close()
        kill_tree(self.process)


def _tail(log: Path, lines: int = 40) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    return "\n".join(text.splitlines()[-lines:])
