"""RocketMQ 4.x delay levels: a message's ``DELAY`` property (1..n) names a delay from a
fixed table instead of a delivery time. RocketMQ's default table has 18 levels (1s 5s 10s
30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h); its 4.x consumers retry a failed
message at level 3 + the times it was consumed again (``node/consumer_retry.py``).

``[messages] delay_levels`` sets the table in RocketMQ's own ``messageDelayLevel`` form,
the same on every node (a delayed message is parked with its delivery time, so a node that
takes over delivers it when its producer's master said). A level past the table's end is
its last level, as in RocketMQ.
"""

from __future__ import annotations

import re

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
LEVEL_PATTERN = re.compile(r"([1-9][0-9]{0,6})([smhd])")
LEVELS_MAX = 64


class DelayLevelsError(ValueError):
    """A ``delay_levels`` text that is not RocketMQ's ``messageDelayLevel`` form."""


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """The delays in ms of a table such as ``"1s 5s 10s 1m 2h"``."""
    words = text.split()
    if not 1 <= len(words) <= LEVELS_MAX:
        raise DelayLevelsError(f"delay levels: 1..{LEVELS_MAX} of them, got {len(words)}")
    delays = []
    for word in words:
        found = LEVEL_PATTERN.fullmatch(word)
        if found is None:
            raise DelayLevelsError(
                f"delay level {word!r} is not a positive number followed by s, m, h or d"
            )
        delays.append(int(found[1]) * UNIT_MS[found[2]])
    return tuple(delays)


DEFAULT_LEVELS_MS = parse_delay_levels(DEFAULT_DELAY_LEVELS)


def level_delay_ms(levels_ms: tuple[int, ...], level: int) -> int:
    """The delay of ``level`` (1-based; past the end: the last level)."""
    if level < 1:
        raise ValueError(f"delay level {level} is not 1 or more")
    return levels_ms[min(level, len(levels_ms)) - 1]
