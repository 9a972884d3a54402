"""The official RocketMQ Python client (``rocketmq-python-client`` 5.1.2) under steady load,
in a process of its own, for failover drills: ``OfficialLoad`` (imported by
``bench.cluster`` and the tests) runs ``python -m bench.official_failover``, which reads
its scenario as JSON on stdin and prints one JSON event per line, each stamped with
``time.monotonic()`` (CLOCK_MONOTONIC: the same clock in every process of the machine, so
the parent compares it with the moment it killed a node).

Scenarios:

- ``load``: a producer sends one message at a time (sync ``send``, the client's own
  retries; ``pause_s`` between sends) and a SimpleConsumer receives and acks, until the
  stop file exists; then the consumer drains until it has received every message whose
  send was acknowledged, or nothing new came for ``drain_idle_s`` (15), or ``drain_s``
  (300) passed. Events: ``ready``, ``sent`` / ``send_failed`` (``t0`` started,
  ``t1`` answered), ``received`` (``t``), ``ack_failed``, ``receive_failed``, ``done``.
- ``sends``: ``count`` sequential sends after a warm-up; one ``latencies`` event (µs).

``pin`` (``"host:port"``) makes the client send every call to that node instead of the
endpoints routes give (it replaces the gRPC target the client builds from them): a
benchmark's way to measure a client connected to a given node, for example a slave.

The client registers the same protobuf names as ferrymq's generated modules: this module
imports it only in the child process, and nothing of ferrymq anywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A send acknowledged this soon after a kill may have been answered by the killed node
# just before it died (bench.cluster's window for its own producer).
OLD_NODE_WINDOW_S = 0.05


# ---- the parent side ------------------------------------------------------------------
class OfficialLoad:
    """One official-client process running a scenario; its events as they arrive.

    By default the Python client (this module's ``load`` or ``sends``); ``argv`` runs
    another client's driver instead (the Java one: ``java_load``), which is given
    ``scenario`` as it is and must print the same events."""

    def __init__(
        self,
        scenario: dict,
        home: str,
        stop_file: str = "",
        argv: Sequence[str] | None = None,
        environment: dict[str, str] | None = None,
    ) -> None:
        """``environment``: variables the client's process gets beside this one's."""
        self.stop_file = stop_file
        self.events: list[dict] = []
        self._lock = threading.Lock()
        self._stderr_path = os.path.join(home, "official-client.stderr")
        command = [sys.executable, "-m", "bench.official_failover"]
        if argv:
            command = list(argv)
            if command[0].endswith("java"):  # the client logs under user.home
                command.insert(1, f"-Duser.home={home}")
        else:
            scenario = {**scenario, "stop_file": stop_file}
        with open(self._stderr_path, "w", encoding="utf-8") as stderr:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                cwd=home if argv else REPO,
                env={**os.environ, **(environment or {}), "HOME": home, "TZ": "UTC"},
            )
        self.process.stdin.write(json.dumps(scenario))
        self.process.stdin.close()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.startswith("{"):
                with self._lock:
                    self.events.append(json.loads(line))

    def of(self, kind: str) -> list[dict]:
        with self._lock:
            return [e for e in self.events if e["event"] == kind]

    def until(self, condition: Callable[[], object], timeout_s: float, what: str):
        """``condition()`` once it is truthy; TimeoutError (with the last events) after
        ``timeout_s``, or at once if the client process ended."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = condition()
            if found:
                return found
            if self.process.poll() is not None and not condition():
                raise RuntimeError(f"official client ended waiting for {what}: {self.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} within {timeout_s} s: {self.tail()}")
            time.sleep(0.02)

    def tail(self) -> str:
        with self._lock:
            return json.dumps(self.events[-8:])

    def stop(self, timeout_s: float = 120) -> list[dict]:
        """Stop producing, let the consumer drain, and wait for the process: its events."""
        if self.stop_file:
            with open(self.stop_file, "w", encoding="utf-8"):
                pass
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        self._reader.join(10)
        if not self.of("done") or self.of("step_failed"):
            raise RuntimeError(f"official client failed: {self.tail()} {self.stderr()}")
        return self.events

    def stderr(self) -> str:
        with open(self._stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()[-2000:]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def load_step(topic: str, group: str, stop_file: str, pause_s: float) -> dict:
    """The ``load`` step every client driver (Java, Java 4.x, Go) takes."""
    return {
        "do": "load",
        "topic": topic,
        "group": group,
        "stop_file": stop_file,
        "pause_ms": round(pause_s * 1000),
    }


def java_load(
    argv: Sequence[str],
    endpoint: str,
    topic: str,
    group: str,
    home: str,
    stop_file: str,
    pause_s: float = 0.0,
) -> OfficialLoad:
    """The official Java 5.x client's ``load`` (its driver's step of that name, the same
    load and events as the Python client's here) against ``endpoint``, with the client's
    default TLS (the nodes' ports take TLS and plaintext)."""
    spec = {
        "endpoints": endpoint,
        "request_timeout_ms": 3000,
        "steps": [load_step(topic, group, stop_file, pause_s)],
    }
    return OfficialLoad(spec, home, stop_file, argv=argv)


def go_load(
    argv: Sequence[str],
    endpoint: str,
    topic: str,
    group: str,
    home: str,
    stop_file: str,
    pause_s: float = 0.0,
) -> OfficialLoad:
    """The official Go 5.x client's ``load`` (its driver's step of that name, the same load
    and events as the Python client's here) against ``endpoint``, with the client's default
    TLS (the nodes' ports take TLS and plaintext)."""
    spec = {"endpoints": endpoint, "steps": [load_step(topic, group, stop_file, pause_s)]}
    return OfficialLoad(spec, home, stop_file, argv=argv)


def remoting_load(
    argv: Sequence[str],
    namesrv: str | list[str],
    topic: str,
    group: str,
    home: str,
    stop_file: str,
    pause_s: float = 0.0,
) -> OfficialLoad:
    """The ``load`` of a 4.x-protocol client (a producer sending one message at a time and a
    push consumer, the same events as the Python client's here), given ``namesrv``, the
    nodes' remoting addresses as its driver takes them: ``;``-separated for the Java 4.x
    client, a list for the Go v2 client and ali-ons."""
    spec = {"namesrv": namesrv, "steps": [load_step(topic, group, stop_file, pause_s)]}
    return OfficialLoad(spec, home, stop_file, argv=argv)


def resumed_after(load: OfficialLoad, moment: float) -> tuple[float | None, float | None]:
    """When sends and receives resumed after ``moment`` (a kill): the first acknowledged
    send the killed node cannot have answered (started after it, or answered more than
    ``OLD_NODE_WINDOW_S`` after it), and the first message received after that window.
    None for what has not resumed (yet)."""
    sends = [
        e["t1"]
        for e in load.of("sent")
        if e["t1"] > moment and (e["t0"] > moment or e["t1"] - moment > OLD_NODE_WINDOW_S)
    ]
    receives = [e["t"] for e in load.of("received") if e["t"] > moment + OLD_NODE_WINDOW_S]
    return (min(sends) if sends else None, min(receives) if receives else None)


def unavailable_ms(load: OfficialLoad, moment: float, timeout_s: float = 30) -> float:
    """How long after ``moment`` both sends and receives had resumed, in ms."""

    def both():
        sent, received = resumed_after(load, moment)
        return (sent, received) if sent is not None and received is not None else None

    sent, received = load.until(both, timeout_s, "sends and receives to resume")
    return (max(sent, received) - moment) * 1000


def check_nothing_lost(events: list[dict]) -> tuple[set[str], set[str]]:
    """(bodies acknowledged to the producer, bodies received): the first must be within
    the second."""
    sent = {e["body"] for e in events if e["event"] == "sent"}
    received = {e["body"] for e in events if e["event"] == "received"}
    return sent, received


def tcp_peer_ports(pid: int) -> set[int]:
    """Remote ports of the established TCP connections of process ``pid`` (Linux)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[9] in inodes and fields[3] == "01":  # ESTABLISHED
                    ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


# ---- the client process ---------------------------------------------------------------
def emit(event: str, **fields) -> None:
    with _print_lock:
        print(json.dumps({"event": event, **fields}), flush=True)


_print_lock = threading.Lock()


def pin_broker_endpoints(address: str) -> None:
    """Every call the client makes goes to ``address``: the gRPC target it builds from
    any endpoints (the access point's, a route's) is replaced."""
    from rocketmq.v5.client.connection import rpc_channel

    rpc_channel.RpcEndpoints.facade = property(lambda self: f"ipv4:{address}")


def _config(scenario: dict):
    from rocketmq import ClientConfiguration, Credentials

    return ClientConfiguration(
        scenario["endpoint"], Credentials(), request_timeout=scenario.get("request_timeout", 3)
    )


def _message(topic: str, body: str):
    from rocketmq import Message

    message = Message()
    message.topic = topic
    message.body = body.encode()
    return message


def _error(error: Exception) -> dict:
    return {"type": type(error).__name__, "message": str(error)[:300]}


def _produce(producer, topic: str, stop: threading.Event, pause_s: float, acked: set) -> None:
    i = 0
    while not stop.is_set():
        body = f"m-{i}"
        i += 1
        t0 = time.monotonic()
        try:
            producer.send(_message(topic, body))
            acked.add(body)
            emit("sent", body=body, t0=t0, t1=time.monotonic())
        except Exception as error:  # reported, the load goes on
            emit("send_failed", body=body, t0=t0, t1=time.monotonic(), **_error(error))
        if pause_s:
            time.sleep(pause_s)


def _consume(consumer, scenario: dict, done: Callable[[set], bool]) -> None:
    received: set[str] = set()
    while not done(received):
        t0 = time.monotonic()
        try:
            messages = consumer.receive(16, scenario.get("invisible_s", 5))
        except Exception as error:
            emit("receive_failed", t0=t0, t1=time.monotonic(), **_error(error))
            time.sleep(0.05)  # the client's own retry is the next receive
            continue
        for message in messages:
            body = message.body.decode()
            received.add(body)
            emit("received", body=body, t=time.monotonic(), attempt=message.delivery_attempt)
            try:
                consumer.ack(message)
            except Exception as error:  # it comes back after its invisibility
                emit("ack_failed", body=body, t=time.monotonic(), **_error(error))


class Drain:
    """When the consumer may stop: once producing has ended (stopped, and its last send
    answered), every acknowledged send received; or nothing new for ``idle_s`` (a consumer
    still catching up drains on), or ``until`` passed."""

    def __init__(
        self, stop: threading.Event, producing: threading.Thread, acked: set, idle_s: float
    ) -> None:
        self.stop = stop
        self.producing = producing
        self.acked = acked
        self.idle_s = idle_s
        self.until = float("inf")
        self._seen = 0
        self._last_new = time.monotonic()

    def done(self, received: set) -> bool:
        now = time.monotonic()
        if len(received) != self._seen:
            self._seen, self._last_new = len(received), now
        if not self.stop.is_set() or self.producing.is_alive():
            # Not while a send may still be answered: a drain that ended before the last
            # send's answer counted that send lost (seen on a loaded host).
            return False
        return self.acked <= received or now > self.until or now - self._last_new > self.idle_s


def load(scenario: dict) -> None:
    from rocketmq import FilterExpression, Producer, SimpleConsumer

    config = _config(scenario)
    topic = scenario["topic"]
    producer = Producer(config, (topic,))
    consumer = SimpleConsumer(
        config,
        scenario["group"],
        {topic: FilterExpression()},
        await_duration=scenario.get("await_s", 2),
    )
    producer.startup()
    consumer.startup()
    stop = threading.Event()
    acked: set[str] = set()
    producing = threading.Thread(
        target=_produce, args=(producer, topic, stop, scenario.get("pause_s", 0.0), acked)
    )
    drain = Drain(stop, producing, acked, scenario.get("drain_idle_s", 15))
    consuming = threading.Thread(target=_consume, args=(consumer, scenario, drain.done))
    producing.start()
    consuming.start()
    emit("ready", t=time.monotonic())
    try:
        while not os.path.exists(scenario["stop_file"]):
            time.sleep(0.02)
    finally:
        drain.until = time.monotonic() + scenario.get("drain_s", 300)
        stop.set()
        producing.join()
        consuming.join()
        producer.shutdown()
        consumer.shutdown()


def sends(scenario: dict) -> None:
    from rocketmq import Producer

    producer = Producer(_config(scenario), (scenario["topic"],))
    producer.startup()
    try:
        for i in range(scenario.get("warmup", 50)):
            producer.send(_message(scenario["topic"], f"warm-{i}"))
        took = []
        for i in range(scenario["count"]):
            message = _message(scenario["topic"], f"s-{i}")
            started = time.perf_counter()
            producer.send(message)
            took.append((time.perf_counter() - started) * 1e6)
        emit("latencies", send_us=took)
    finally:
        producer.shutdown()


SCENARIOS = {"load": load, "sends": sends}


def main() -> int:
    scenario = json.loads(sys.stdin.read())
    if scenario.get("pin"):
        pin_broker_endpoints(scenario["pin"])
    try:
        SCENARIOS[scenario["scenario"]](scenario)
    except Exception as error:
        emit("error", **_error(error))
        return 1
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
