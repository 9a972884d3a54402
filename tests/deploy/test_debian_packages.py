"""deploy/debian_packages.py: the one way tests, demos and benchmarks install a Debian
package. apt-get is replaced by a recorder: what is checked is what runs, in which order,
under which conditions."""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

from deploy import debian_packages


@pytest.fixture
def apt(tmp_path, monkeypatch):
    """Root with apt-get; every command recorded, with whether policy-rc.d was in place;
    ``apt.fail`` names commands (argv[1]) that fail."""
    policy = tmp_path / "policy-rc.d"
    monkeypatch.setattr(debian_packages, "POLICY_RC_D", str(policy))
    monkeypatch.setattr(debian_packages, "INSTALL_LOCK", str(tmp_path / "install.lock"))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(debian_packages.shutil, "which", lambda name: f"/usr/bin/{name}")

    class Apt:
        ran: list[tuple[list[str], bool]] = []
        fail: set[str] = set()

    def run(argv, **kwargs):
        assert kwargs["env"]["DEBIAN_FRONTEND"] == "noninteractive"
        Apt.ran.append((argv, policy.exists() and "exit 101" in policy.read_text()))
        return subprocess.CompletedProcess(argv, 100 if argv[1] in Apt.fail else 0)

    monkeypatch.setattr(debian_packages.subprocess, "run", run)
    Apt.ran, Apt.fail = [], set()
    return Apt


def test_an_install_starts_no_service_and_leaves_no_policy_behind(apt, tmp_path):
    assert debian_packages.install(["prometheus"], output=subprocess.DEVNULL) == ""
    assert apt.ran == [
        (["apt-get", "install", "-y", "-q", "--no-install-recommends", "prometheus"], True)
    ]
    assert not (tmp_path / "policy-rc.d").exists()


def test_a_failed_install_updates_the_package_lists_and_tries_once_more(apt):
    apt.fail = {"install"}
    error = debian_packages.install(["redis-server", "nats-server"], output=subprocess.DEVNULL)
    assert error == "apt-get install redis-server nats-server failed"
    assert [argv[1] for argv, _ in apt.ran] == ["install", "update", "install"]


def test_a_package_another_process_installed_meanwhile_is_not_installed_again(apt):
    """The second of two installers waits for the first, then finds the binary."""
    installed = threading.Event()
    with open(debian_packages.INSTALL_LOCK, "w") as lock:
        debian_packages.fcntl.flock(lock, debian_packages.fcntl.LOCK_EX)
        waiter = threading.Thread(
            target=lambda: apt.ran.append(
                (["result", debian_packages.install(["prometheus"], installed.is_set)], False)
            )
        )
        waiter.start()
        waiter.join(0.2)
        assert waiter.is_alive()  # held by the lock
        installed.set()  # the first installer's work
    waiter.join(10)
    assert apt.ran == [(["result", ""], False)]


def test_without_root_nothing_runs_and_the_reason_is_given(apt, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert debian_packages.install(["prometheus"]) == (
        "not root with apt-get: cannot install prometheus"
    )
    assert apt.ran == []
