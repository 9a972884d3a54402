"""A private Prometheus server for tests and demos: temp config and storage, a free port.

``ensure_installed()`` installs the Debian package ``prometheus`` when ``prometheus`` or
``promtool`` is missing (root only); the package's system service is never used: every
server here is a child process with its own config, data directory and port, stopped with
the object that started it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from deploy import debian_packages

START_TIMEOUT_S = 60


class PrometheusUnavailable(RuntimeError):
    """Prometheus is not installed and cannot be installed here."""


def ensure_installed() -> tuple[str, str]:
    """Paths of ``prometheus`` and ``promtool``, installing the Debian package if needed."""

    def found() -> tuple[str | None, str | None]:
        return shutil.which("prometheus"), shutil.which("promtool")

    if all(found()):
        return found()
    error = debian_packages.install(["prometheus"], lambda: all(found()), subprocess.DEVNULL)
    if error:
        raise PrometheusUnavailable(f"prometheus is missing ({error}); install the Debian package")
    prometheus, promtool = found()
    if not (prometheus and promtool):
        raise PrometheusUnavailable("the prometheus package installed no prometheus/promtool")
    return prometheus, promtool


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@dataclass
class PrometheusServer:
    """One Prometheus process; ``query`` and ``query_range`` speak its HTTP API."""

    process: subprocess.Popen
    url: str
    directory: str
    _own_directory: bool = field(default=False, repr=False)

    @classmethod
    def start(
        cls,
        config_yaml: str,
        rule_files: dict[str, str] | None = None,
        directory: str | None = None,
    ) -> PrometheusServer:
        """Start a server on a free port with ``config_yaml`` written as its config; rule
        files named in the config are written beside it from ``rule_files``."""
        prometheus, _ = ensure_installed()
        own = directory is None
        directory = directory or tempfile.mkdtemp(prefix="ferrymq-prometheus-")
        os.makedirs(directory, exist_ok=True)
        for name, text in (rule_files or {}).items():
            with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
                f.write(text)
        config_path = os.path.join(directory, "prometheus.yml")
        with open(config_path, "w", encoding="utf-8") as f:
            f.write(config_yaml)
        port = free_port()
        log = open(os.path.join(directory, "prometheus.log"), "wb")  # noqa: SIM115
        process = subprocess.Popen(
            [
                prometheus,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={os.path.join(directory, 'tsdb')}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
                "--storage.tsdb.retention.time=1d",
            ],
            cwd=directory,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        server = cls(process, f"http://127.0.0.1:{port}", directory, own)
        server._wait_ready(START_TIMEOUT_S)
        return server

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"prometheus not ready after {timeout_s} s: {self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(os.path.join(self.directory, "prometheus.log"), encoding="utf-8") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def api(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as answer:
            body = json.load(answer)
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = at
        return self.api("query", **params)["result"]

    def query_range(
        self, expr: str, start: float, end: float, step_s: float
    ) -> list[dict[str, Any]]:
        return self.api("query_range", query=expr, start=start, end=end, step=step_s)["result"]

    def wait_for(self, expr: str, timeout_s: float, condition=bool) -> list[dict[str, Any]]:
        """Poll ``expr`` until ``condition(result)`` holds; the last result is returned."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.query(expr)
            if condition(result):
                return result
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{expr!r} did not hold within {timeout_s} s: {result}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self._own_directory:
            shutil.rmtree(self.directory, ignore_errors=True)
