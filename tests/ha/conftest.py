"""Fixtures the replica lane's tests share."""

from __future__ import annotations

import pytest

from tests.support.replica_frames import SegmentFile


@pytest.fixture
def files():
    """Two scratch segment files (the C's and the twin's), closed and removed after."""
    pair = SegmentFile(), SegmentFile()
    yield pair
    for file in pair:
        file.close()
