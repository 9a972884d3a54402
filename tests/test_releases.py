"""The release record (``releases.toml``, ``CHANGELOG.md``, ``pyproject.toml``) agrees with
itself: versions only go up, each release has a full commit hash and a changelog entry, and
the version being built is newer than the last release and heads the changelog."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def test_releases_changelog_and_version_agree():
    releases = tomllib.loads((ROOT / "releases.toml").read_text())["release"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    building = Version(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])
    versions = [Version(r["version"]) for r in releases]
    assert versions == sorted(versions) and len(set(versions)) == len(versions), versions
    for release in releases:
        assert re.fullmatch(r"[0-9a-f]{40}", release["commit"]), release
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", release["date"]), release
        assert f"## {release['version']} ({release['date']})" in changelog, release
    assert building > versions[-1], (building, versions[-1])
    headings = re.findall(r"^## (.+)$", changelog, flags=re.MULTILINE)
    assert headings[0] == f"Unreleased ({building})", headings
