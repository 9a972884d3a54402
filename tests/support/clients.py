"""Build, install and run the official RocketMQ clients' driver programs (Java, Go, Node).

Each driver (``tests/compat/java/``, ``tests/compat/go/``, ``tests/compat/alions/``) is a
small program of ours that links one official client, reads a JSON spec (what to send,
receive, fail, ...) on its standard input and prints one JSON object per line for each
thing that happened, the last ``{"event": "done"}``. ``run`` starts a driver in a process
of its own and returns those lines.

Everything a driver needs comes from the ordinary registries, fetched by the test run
itself into ``.cache/clients/`` in the checkout (gitignored; ``FERRYMQ_CLIENTS_CACHE``
moves it): Maven Central through ``mvn`` into a Maven repository of its own there, the Go
module proxy through ``go`` into a module cache of its own there, npm into a cache of its
own there. Only the toolchains (Java 17 + Maven, Go, Node.js + npm) come from the machine.
A build is keyed on a hash of its sources and dependency list, so a second run reuses it;
builds take a file lock, so two pytest processes never build the same thing at once, and
a build lands with a rename, so one cut short leaves nothing that looks finished. A
toolchain, registry or artifact that is missing raises ``ClientUnavailable`` with one line
saying which; the tests fail with that line (``unavailable``), never skip.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.peers import jvm

# The drivers' sources, beside the tests that run them.
HERE = Path(__file__).resolve().parent.parent / "compat"
ROOT = HERE.parent.parent
CACHE = Path(os.environ.get("FERRYMQ_CLIENTS_CACHE", str(ROOT / ".cache" / "clients")))
# A first build downloads a few hundred MB on 2 shared cores; later ones reuse it.
INSTALL_TIMEOUT_S = 1500.0

# The official clients, by version (tests/compat/README.md says what each driver covers).
# rocketmq-client-java 5.2.0, the newest. Since 5.0.8 its shaded jar pairs slf4j 1.7 with
# logback 1.3, so the client logs nothing: a failing test shows the driver's events only.
JAVA_GRPC_CLIENT = jvm.Artifact("org.apache.rocketmq", "rocketmq-client-java", "5.2.0")
JAVA_REMOTING_CLIENT = jvm.Artifact("org.apache.rocketmq", "rocketmq-client", "4.9.8")
JAVA_REMOTING_ACL = jvm.Artifact("org.apache.rocketmq", "rocketmq-acl", "4.9.8")  # AclClientRPCHook
# The same client in its 5.x line (it kept the 4.x protocol): recall (5.3.2) and priority (5.4).
# 5.5.0: the newest whose jar Maven Central serves here (5.5.1 is listed, its jar is not).
JAVA_REMOTING_CLIENT_5 = jvm.Artifact("org.apache.rocketmq", "rocketmq-client", "5.5.0")
JAVA_TOOLS = jvm.Artifact("org.apache.rocketmq", "rocketmq-tools", "5.3.3")
JAVA_TOOLS_4 = jvm.Artifact("org.apache.rocketmq", "rocketmq-tools", "4.9.8")
GSON = jvm.Artifact("com.google.code.gson", "gson", "2.10.1")


MQADMIN_LOGBACK = """<configuration>
  <appender name="file" class="ch.qos.logback.core.FileAppender">
    <file>${user.home}/logs/mqadmin.log</file>
    <encoder><pattern>%d %-5p [%t] %c{1} - %m%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="file"/></root>
</configuration>
"""


class ClientUnavailable(RuntimeError):
    """A toolchain, registry or artifact is missing: the message is the one line to show."""


@dataclass(frozen=True)
class JavaFamily:
    name: str
    main: str
    artifacts: tuple[jvm.Artifact, ...]
    sources: tuple[str, ...]  # folders under tests/compat/java/


@dataclass(frozen=True)
class Driver:
    """A built driver: the argv that runs it and the environment it needs."""

    name: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


JAVA_FAMILIES = {
    "java-grpc": JavaFamily(
        "java-grpc", "Grpc5Driver", (JAVA_GRPC_CLIENT, GSON), ("common", "grpc5")
    ),
    "java-remoting": JavaFamily(
        "java-remoting",
        "Remoting4Driver",
        (JAVA_REMOTING_CLIENT, JAVA_REMOTING_ACL, GSON),
        ("common", "remoting4"),
    ),
    "java-remoting5": JavaFamily(
        "java-remoting5",
        "Remoting5Driver",
        (JAVA_REMOTING_CLIENT_5, GSON),
        ("common", "remoting5"),
    ),
    # mqadmin's commands, several in one JVM (rocketmq-tools' MQAdminStartup.main0).
    "mqadmin": JavaFamily("mqadmin", "MqadminDriver", (JAVA_TOOLS, GSON), ("common", "mqadmin")),
    # The same driver on the 4.9 tools, which read the runtime table by other keys.
    "mqadmin4": JavaFamily(
        "mqadmin4", "MqadminDriver", (JAVA_TOOLS_4, GSON), ("common", "mqadmin")
    ),
}
MQADMIN_FAMILIES = ("mqadmin", "mqadmin4")
GO_FAMILIES = {"go-grpc": "grpc5", "go-remoting": "remoting"}


# ---- locks, hashes, commands ---------------------------------------------------------
@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """An exclusive lock shared with every other process using this cache."""
    locks = CACHE / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def digest(files: Sequence[Path], *extra: str) -> str:
    """A hash of the files' names and bytes and of ``extra``: the cache key of a build."""
    h = hashlib.sha256()
    for text in extra:
        h.update(text.encode() + b"\0")
    for path in sorted(files):
        h.update(str(path.relative_to(HERE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def tool(name: str, why: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise ClientUnavailable(f"{name} not found on PATH: {why}")
    return found


def _last_lines(output: str, count: int = 3) -> str:
    """The first error lines of a failed command (each with the two after it, where javac
    and go name the symbol), else its last lines: one line to show."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if "error" in line.lower()]
    shown = [" ".join(lines[i : i + 3]) for i in errors[:count]] if errors else lines[-count:]
    return " | ".join(shown)[:1000] or "no output"


def install_step(argv: Sequence[str], what: str, cwd: Path, env: dict[str, str]) -> None:
    """One download or build command; ``ClientUnavailable`` in one line when it fails."""
    try:
        done = subprocess.run(
            list(argv),
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise ClientUnavailable(f"{what}: not done within {INSTALL_TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        raise ClientUnavailable(f"{what} failed: {_last_lines(done.stdout + done.stderr)}")


@contextlib.contextmanager
def landing(final: Path) -> Iterator[Path]:
    """A fresh directory beside ``final`` that becomes ``final`` when the block ends well;
    then the builds it replaces (``final``'s name up to its key, another key) go."""
    final.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        yield work
        shutil.rmtree(final, ignore_errors=True)
        os.rename(work, final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    family = final.name.rsplit("-", 1)[0] + "-"
    for old in final.parent.glob(family + "*"):
        if old != final and len(old.name) == len(final.name) and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)


# ---- Java ----------------------------------------------------------------------------
def maven_libs(name: str, artifacts: Sequence[jvm.Artifact]) -> Path:
    """The jars of ``artifacts`` and their dependencies, fetched from Maven Central by
    ``mvn`` into this cache's own Maven repository; reused while the list is the same."""
    key = digest([], *(a.coordinate for a in artifacts))
    lib = CACHE / "java" / f"{name}-libs-{key}"
    if (lib / "ok").exists():
        return lib
    mvn = tool("mvn", "the Java drivers fetch their clients from Maven Central with it")
    with locked("maven"):  # one local repository for every list: one mvn at a time
        if (lib / "ok").exists():
            return lib
        coordinates = ", ".join(a.coordinate for a in artifacts)
        with landing(lib) as work:
            (work / "pom.xml").write_text(jvm.pom(f"compat-{name}", artifacts))
            argv = [
                mvn,
                "-B",
                "-q",
                f"-Dmaven.repo.local={CACHE / 'm2'}",
                "dependency:copy-dependencies",
                f"-DoutputDirectory={work / 'jars'}",
                "-DincludeScope=runtime",
            ]
            install_step(argv, f"mvn fetching {coordinates}", work, dict(os.environ))
            (work / "ok").write_text(coordinates + "\n")
    return lib


def java_driver(family_name: str) -> Driver:
    """The Java driver ``family_name`` (``JAVA_FAMILIES``), compiled against its client's
    jars the first time its sources change."""
    family = JAVA_FAMILIES[family_name]
    java = tool("java", "the Java drivers run on Java 17")
    javac = tool("javac", "the Java drivers are compiled with it")
    lib = maven_libs(family.name, family.artifacts)
    sources = [
        p for folder in family.sources for p in sorted((HERE / "java" / folder).glob("*.java"))
    ]
    key = digest(sources, lib.name)
    built = CACHE / "java" / f"{family.name}-{key}"
    if not (built / "ok").exists():
        with locked(f"javac-{family.name}"), contextlib.ExitStack() as stack:
            if not (built / "ok").exists():
                work = stack.enter_context(landing(built))
                argv = [
                    javac,
                    "-nowarn",
                    "-encoding",
                    "UTF-8",
                    "--release",
                    "11",
                    "-cp",
                    str(lib / "jars" / "*"),
                    "-d",
                    str(work / "classes"),
                    *map(str, sources),
                ]
                install_step(argv, f"javac of the {family.name} driver", work, dict(os.environ))
                (work / "ok").write_text(key + "\n")
    classpath = f"{built / 'classes'}:{lib / 'jars' / '*'}"
    return Driver(
        family.name,
        (
            java,
            "-Xms64m",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            classpath,
            family.main,
        ),
    )


# ---- Go ------------------------------------------------------------------------------
def go_environment() -> dict[str, str]:
    go_cache = CACHE / "go"
    return {
        **os.environ,
        "GOPATH": str(go_cache / "path"),
        "GOMODCACHE": str(go_cache / "mod"),
        "GOCACHE": str(go_cache / "build-cache"),
        "GOFLAGS": "-mod=mod",
        "GOTOOLCHAIN": "local",  # never download another Go
        "CGO_ENABLED": "0",
    }


def go_driver(family_name: str) -> Driver:
    """The Go driver ``family_name`` (``GO_FAMILIES``), built with ``go build`` against the
    module versions its go.mod pins (go.sum committed beside it)."""
    folder = HERE / "go" / GO_FAMILIES[family_name]
    go = tool("go", "the Go drivers are built with it")
    files = sorted(
        p for p in folder.iterdir() if p.name in ("go.mod", "go.sum") or p.suffix == ".go"
    ) + sorted((HERE / "go" / "common").glob("*.go"))  # copied beside main.go
    key = digest(files)
    binary = CACHE / "go" / f"{family_name}-{key}" / "driver"
    if not binary.exists():
        with locked(f"go-{family_name}"):
            if not binary.exists():
                with landing(binary.parent) as work:
                    source = work / "src"
                    source.mkdir()
                    for path in files:
                        shutil.copy(path, source / path.name)
                    argv = [go, "build", "-trimpath", "-o", str(work / "driver"), "."]
                    install_step(
                        argv, f"go build of the {family_name} driver", source, go_environment()
                    )
    return Driver(family_name, (str(binary),))


# ---- Node (ali-ons) ------------------------------------------------------------------
def alions_driver() -> Driver:
    """The ali-ons driver: its package.json installed by ``npm`` beside a copy of it."""
    folder = HERE / "alions"
    node = tool("node", "the ali-ons driver runs on Node.js")
    npm = tool("npm", "the ali-ons driver's packages come from npm")
    files = sorted(
        p
        for p in folder.iterdir()
        if p.name in ("package.json", "package-lock.json") or p.suffix == ".js"
    )
    key = digest(files)
    installed = CACHE / "node" / f"alions-{key}"
    if not (installed / "ok").exists():
        with locked("npm-alions"), contextlib.ExitStack() as stack:
            if not (installed / "ok").exists():
                work = stack.enter_context(landing(installed))
                for path in files:
                    shutil.copy(path, work / path.name)
                command = "ci" if (work / "package-lock.json").exists() else "install"
                argv = [npm, command, "--no-audit", "--no-fund", "--cache", str(CACHE / "npm")]
                install_step(argv, f"npm {command} of the ali-ons driver", work, dict(os.environ))
                (work / "ok").write_text(key + "\n")
    return Driver("alions", (node, str(installed / "driver.js")))


def driver(name: str) -> Driver:
    """Any driver by name: java-grpc, java-remoting, java-remoting5, mqadmin, mqadmin4, go-grpc,
    go-remoting, alions."""
    if name in JAVA_FAMILIES:
        return java_driver(name)
    if name in GO_FAMILIES:
        return go_driver(name)
    if name == "alions":
        return alions_driver()
    raise KeyError(name)


# The order ``prebuild`` builds them in: first those the earliest test files use
# (tests/cluster/ runs the Java clients and mqadmin), then the longest build (go-grpc).
PREBUILD_ORDER = (
    "java-grpc",
    "java-remoting",
    "mqadmin",
    "go-grpc",
    "mqadmin4",
    "java-remoting5",
    "go-remoting",
    "alions",
)


def prebuild() -> int:
    """Build every driver, one after the other, printing a line for each. ``make test``
    runs this beside its tests (``--prebuild-drivers``, tests/conftest.py), so that the
    downloads and builds overlap the tests that need no driver: a test that needs one takes
    its lock, and finds it built or waits for the build under way. A build that fails is
    left to the tests that need it, which report it in their one line."""
    failed = 0
    for name in PREBUILD_ORDER:
        started = time.monotonic()
        try:
            driver(name)
        except ClientUnavailable as error:
            failed += 1
            print(f"{name}: {unavailable(error)}", flush=True)
        else:
            print(f"{name}: ready after {time.monotonic() - started:.1f} s", flush=True)
    return 1 if failed else 0


def unavailable(error: Exception) -> str:
    return f"official client unavailable: {error}"


def required(name: str) -> Driver:
    """``driver(name)`` for a test: a missing toolchain, registry or artifact fails the
    test with the one line that names it (never a skip)."""
    import pytest

    try:
        return driver(name)
    except ClientUnavailable as error:
        pytest.fail(unavailable(error), pytrace=False)


def first_of(events: list[dict]) -> dict[str, dict]:
    """Each body's first event (a redelivery comes later)."""
    out: dict[str, dict] = {}
    for event in events:
        out.setdefault(event["body"], event)
    return out


# ---- running -------------------------------------------------------------------------
@dataclass
class Run:
    events: list[dict]
    stderr: str
    returncode: int
    seconds: float

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e.get("event") == kind]

    def explain(self) -> str:
        """What to show when an assertion on this run fails."""
        shown = "\n".join(json.dumps(e) for e in self.events[-60:])
        return (
            f"exit {self.returncode} after {self.seconds:.1f} s\nevents:\n{shown}\n"
            f"stderr and client logs (tails):\n{self.stderr[-6000:]}"
        )


def run(
    built: Driver,
    spec: dict,
    home: Path,
    timeout_s: float = 120,
    env: dict[str, str] | None = None,
    check_done: bool = True,
) -> Run:
    """Run ``built`` with ``spec`` on its standard input, ``HOME`` (and Java's user.home,
    where the clients write their logs) at ``home``; its JSON lines. Unless
    ``check_done`` is false, a driver that did not end with ``done`` fails the assertion
    here with its events, stderr and the client log's tail."""
    home.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, **built.env, "HOME": str(home), **(env or {})}
    # The Go 5.x client logs under $rocketmq.client.logRoot, else under "/logs".
    environment.setdefault("rocketmq.client.logRoot", str(home / "logs" / "rocketmqlogs"))
    if built.name in MQADMIN_FAMILIES:
        # mqadmin configures its logging from $ROCKETMQ_HOME/conf/logback_tools.xml and runs
        # no command without it.
        (home / "conf").mkdir(exist_ok=True)
        (home / "conf" / "logback_tools.xml").write_text(MQADMIN_LOGBACK)
        environment["ROCKETMQ_HOME"] = str(home)
    argv = list(built.argv)
    if argv[0].endswith("java"):
        argv.insert(1, f"-Duser.home={home}")
    started = time.monotonic()
    try:
        done = subprocess.run(
            argv,
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=environment,
            cwd=home,
        )
        stdout, stderr, code = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as expired:
        stdout = _text(expired.stdout)
        stderr = _text(expired.stderr) + f"\n(killed after {timeout_s:.0f} s)"
        code = -9
    events = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                events.append(json.loads(line))
    result = Run(events, stderr + client_logs(home), code, time.monotonic() - started)
    if check_done:
        assert events and events[-1].get("event") == "done", result.explain()
    return result


def _text(output: bytes | str | None) -> str:
    if output is None:
        return ""
    return output if isinstance(output, str) else output.decode(errors="replace")


def client_logs(home: Path, tail: int = 3000) -> str:
    """The tails of the log files the clients wrote under ``home`` (their usual places:
    ``~/logs/rocketmq*``), for failure messages."""
    parts = []
    for path in sorted(home.glob("logs/**/*")):
        if path.is_file() and path.stat().st_size:
            text = path.read_text(errors="replace")[-tail:]
            parts.append(f"\n--- {path.relative_to(home)} ---\n{text}")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.support.clients argv NAME``: build the driver NAME and print its
    command line as JSON, for a benchmark to run it (``make bench-models``);
    ``python -m tests.support.clients prebuild``: build every driver (``prebuild``)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.support.clients")
    parser.add_argument("command", choices=["argv", "prebuild"])
    parser.add_argument("name", nargs="?")
    args = parser.parse_args(argv)
    if args.command == "prebuild":
        return prebuild()
    if args.name is None:
        parser.error("argv needs the driver's NAME")
    print(json.dumps(list(driver(args.name).argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
