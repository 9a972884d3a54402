"""How the CLI prints: aligned tables for people, JSON for scripts, a progress bar on
stderr for long runs (only on a terminal, so pipes and logs stay clean)."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from typing import Any


def as_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {k: as_plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return value.hex()
    if isinstance(value, list | tuple):
        return [as_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: as_plain(v) for k, v in value.items()}
    return value


def emit_json(value: Any) -> None:
    print(json.dumps(as_plain(value), indent=2, sort_keys=True))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, bytes):
        text = as_plain(value)
        return text if len(text) <= 60 else text[:57] + "..."
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


class Progress:
    """``[#####.....] 512/1000  4,210/s`` on stderr, redrawn at most ten times a second."""

    def __init__(self, total: int | None, label: str, enabled: bool | None = None) -> None:
        self.total = total
        self.label = label
        self.done = 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.started = time.monotonic()
        self._drawn = 0.0

    def advance(self, count: int = 1) -> None:
        self.done += count
        now = time.monotonic()
        if self.enabled and now - self._drawn >= 0.1:
            self._drawn = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        rate = self.done / max(now - self.started, 1e-9)
        if self.total:
            filled = int(30 * self.done / self.total)
            bar = f"[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total}"
        else:
            bar = f"{self.done}"
        sys.stderr.write(f"\r{self.label} {bar}  {rate:,.0f}/s ")
        sys.stderr.flush()

    def finish(self) -> None:
        if self.enabled:
            self._draw(time.monotonic())
            sys.stderr.write("\n")


def admin_of(args) -> Any:
    """An ``Admin`` client of ``--server`` (imported late: ``--help`` stays fast)."""
    from ferrymq.client import Admin

    return Admin(args.server)


def show(args, value: Any, text: str) -> None:
    """``value`` as JSON under ``--json``, else the human sentence ``text``."""
    if args.json:
        emit_json(value)
    else:
        print(text)


def show_table(args, values: Any, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    if args.json:
        emit_json(values)
    elif rows:
        print(table(headers, rows))
    else:
        print("(none)")
