"""Every recorded release's data directory (``tests/golden/<version>/``, written by
``tests/support/golden_fixture.py`` with that release's code) opens with the current code,
which finds in it what the release wrote: routing (topics, groups, users with sealed keys,
ACL entries: the Raft journal), messages with their tags, keys and properties at their
offsets (the CommitLog, consume queues, index), committed offsets, POP deliveries acked and
in flight, and a delayed message that came due while the node was down (the timer
records)."""

from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path

import pytest

from ferrymq.client import Admin, Message, Producer, PullConsumer, SimpleConsumer
from ferrymq.launcher.node_process import start_node_process
from ferrymq.launcher.polling import until
from tests.support import golden_fixture as fixture

HERE = Path(__file__).resolve().parent
RELEASES = sorted(p.name for p in HERE.iterdir() if (p / "manifest.json").exists())


def read_all(address: str, topic: str, queues: int) -> list:
    with PullConsumer(address, "golden-check", start="beginning", security=fixture.ROOT) as c:
        c.assign(topic, list(range(queues)))
        found: list = []
        while batch := c.poll(wait_s=0.2):
            found += batch
        return found


def extract_data(archive: tarfile.TarFile, into: Path) -> None:
    """A release's data directory, extracted with tarfile's "data" filter where it has one
    (Python 3.11.4 on); before that (Debian 12's 3.11.2, the image's) with what the filter
    refuses refused here: a member that is not a plain file or directory, or outside
    ``into``."""
    if hasattr(tarfile, "data_filter"):
        archive.extractall(into, filter="data")
        return
    root = into.resolve()
    for member in archive.getmembers():
        inside = (root / member.name).resolve().is_relative_to(root)
        if not inside or not (member.isfile() or member.isdir()):
            raise tarfile.TarError(f"{member.name}: not a plain file or directory in {root}")
    archive.extractall(into)


@pytest.fixture(params=RELEASES)
def opened(request, tmp_path):
    release = HERE / request.param
    with tarfile.open(release / "node-data.tar.gz") as archive:
        extract_data(archive, tmp_path)
    manifest = json.loads((release / "manifest.json").read_text(encoding="utf-8"))
    node = start_node_process(str(tmp_path / "node"), fixture.CONFIG)
    try:
        yield node, manifest
    finally:
        node.stop()


def test_a_release_data_directory_opens_with_everything_it_held(opened):
    node, manifest = opened
    with Admin(node.address, security=fixture.ROOT) as admin:
        topics = {t.name: t for t in admin.list_topics()}
        assert {fixture.NORMAL, fixture.FIFO, fixture.DELAY} <= set(topics)
        groups = {g.name: g for g in admin.list_groups()}
        assert groups[fixture.READERS].max_delivery_attempts == 5
        assert groups[fixture.FIFO_READERS].fifo
        users = {u.access_key: u for u in admin.list_users()}
        assert fixture.APP.access_key in users
        assert any("golden-*" in str(rule) for rule in users[fixture.APP.access_key].acl)
        committed = {
            str(q.queue_id): q.consumer_offset
            for q in admin.group_progress(fixture.READERS, fixture.NORMAL)
        }
        assert committed == manifest["committed"]
        admin.create_group("golden-check")
    sent = {m["id"]: m for m in manifest["messages"]}
    for topic, queues in ((fixture.NORMAL, 4), (fixture.FIFO, 2)):
        for message in read_all(node.address, topic, queues):
            expected = sent.pop(message.message_id)
            assert message.body.decode() == expected["body"]
            assert message.tag == expected["tag"] and message.keys == expected["keys"]
            assert message.message_group == expected["group"]
            assert message.queue_offset == expected["queue_offset"]
            for key, value in expected["properties"].items():
                assert message.properties[key] == value
    assert not sent, sorted(sent)  # every message written was read back

    # POP: what was acked never comes back; what was in flight does, with the rest.
    with SimpleConsumer(
        node.address, fixture.POP_READERS, fixture.NORMAL, security=fixture.ROOT
    ) as c:
        seen: dict[str, int] = {}
        deadline = time.monotonic() + 30
        while len(seen) < 40 - len(manifest["pop_acked"]) and time.monotonic() < deadline:
            for message in c.receive(max_messages=32, invisible_s=60, wait_s=1):
                seen[message.message_id] = message.delivery_attempt
    assert not set(manifest["pop_acked"]) & set(seen)
    assert len(seen) == 40 - len(manifest["pop_acked"])
    assert all(seen[i] == 2 for i in manifest["pop_in_flight"]), seen

    # The delayed message came due while the node was down: delivered once, now.
    delayed = manifest["delayed"]
    assert delayed["due_ms"] < time.time() * 1000
    until(
        lambda: [m.body for m in read_all(node.address, fixture.DELAY, 1)] == [b"delayed"],
        20,
        "the delayed message in its topic",
    )
    # The app user's sealed secret still verifies its signature: it may publish.
    with Producer(node.address, security=fixture.APP) as producer:
        producer.send(Message(fixture.DELAY, b"by app", delivery_time_ms=int(time.time() * 1000)))


@pytest.mark.parametrize("name", ["../outside", "/absolute"])
def test_a_data_archive_with_a_member_outside_its_root_is_refused(tmp_path, name):
    """What the golden fixture extracts is refused as tarfile's "data" filter refuses it,
    on every Python it runs on."""
    built = tmp_path / "bad.tar"
    with tarfile.open(built, "w") as archive:
        member = tarfile.TarInfo(name)
        archive.addfile(member)
    (tmp_path / "into").mkdir()
    with tarfile.open(built) as archive, pytest.raises(tarfile.TarError):
        extract_data(archive, tmp_path / "into")
    assert not (tmp_path / "outside").exists()
