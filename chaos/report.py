"""The run's outputs: report.json (findings, fault windows, per-second series), a readable
summary.txt, and timeline.png (throughput and latency over time, fault windows shaded)."""

from __future__ import annotations

import json
import os
from collections import defaultdict

from chaos.checker import Findings
from chaos.history import OK, History


def series(history: History) -> list[dict]:
    """Per second of the run: acknowledged sends, other outcomes, mean and max latency."""
    buckets: dict[int, dict] = defaultdict(lambda: {"ok": 0, "errors": 0, "latencies": []})
    for send in history.sends:
        if send.completed_s is None:
            continue
        bucket = buckets[int(send.completed_s)]
        if send.outcome == OK:
            bucket["ok"] += 1
            bucket["latencies"].append((send.completed_s - send.invoked_s) * 1000)
        else:
            bucket["errors"] += 1
    rows = []
    for second in range(int(history.duration_s) + 1):
        bucket = buckets.get(second, {"ok": 0, "errors": 0, "latencies": []})
        latencies = bucket["latencies"]
        rows.append(
            {
                "second": second,
                "ok": bucket["ok"],
                "errors": bucket["errors"],
                "latency_ms_mean": round(sum(latencies) / len(latencies), 2) if latencies else None,
                "latency_ms_max": round(max(latencies), 2) if latencies else None,
            }
        )
    return rows


def summary(findings: Findings) -> str:
    lines = [
        f"mode {findings.mode}: {'VALID' if findings.valid else 'INVALID'}",
        f"sends {findings.sends}, acknowledged {findings.acknowledged}"
        f" {findings.acknowledged_by_topic}, outcomes {findings.outcomes}",
        f"outcomes of sends invoked during faults {findings.outcomes_in_faults}"
        f" (unknown: {share(findings.outcomes_in_faults, 'unknown')})",
        f"lost acknowledged {len(findings.lost)} {findings.lost_by_position}"
        f" (within the ASYNC bound: {len(findings.lost_within_async_bound)};"
        f" unsynced on an in-sync node when every node lost power:"
        f" {len(findings.lost_within_power_bound)}; bodies in rollback files:"
        f" {findings.rolled_back})",
        f"duplicated {len(findings.duplicated)}, unexpected {len(findings.unexpected)},"
        f" recovered {findings.recovered}, refused yet present {len(findings.failed_but_present)}",
        f"queue holes {len(findings.queue_holes)},"
        f" order violations {len(findings.order_violations)},"
        f" delivered then lost {len(findings.delivered_then_lost)},"
        f" delivered from another offset {len(findings.misplaced_deliveries)},"
        f" replicas differ {bool(findings.replicas_differ)},"
        f" records served {findings.served_records}"
        f" (differing from the log: {len(findings.served_differs)})",
        f"POP deliveries {findings.pop_deliveries} (redeliveries {findings.pop_redeliveries},"
        f" left to expire on purpose {findings.pop_released}),"
        f" delivered again after a successful ack {len(findings.acked_then_redelivered)}"
        f" (after a power loss of every node: {len(findings.redelivered_after_power_loss)}),"
        f" FIFO order violations {len(findings.fifo_order_violations)}"
        f" (overtaking one left to expire: {len(findings.fifo_release_overtaken)}),"
        f" priority order violations {len(findings.priority_order_violations)},"
        f" dead-lettered {len(findings.dead_lettered)}",
        f"dead-letter group: nacks {findings.pop_nacked}, doomed acknowledged sends"
        f" dead-lettered {findings.doomed_dead_lettered}, missing from the DLQ"
        f" {len(findings.doomed_not_dead_lettered)} (lost to a power loss of every node:"
        f" {len(findings.dead_letters_lost_to_power)}), dead-lettered after a successful ack"
        f" {len(findings.dead_lettered_after_ack)}, after failed acks"
        f" {len(findings.dead_lettered_unacked)}",
        f"dead-letter resends {findings.resend_outcomes}: resent {findings.resent},"
        f" delivered again {findings.resent_delivered_again}, never"
        f" {len(findings.resent_never_delivered)}, resent twice {len(findings.resent_twice)}"
        f" (after a power loss of every node: {len(findings.resends_after_power_loss)})",
        f"acknowledged never delivered"
        f" { ({g: len(b) for g, b in findings.never_delivered.items()}) },"
        f" {catch_up_line(findings.catch_up)}",
        f"nodes found crashed {len(findings.crashes)}, exceptions in node logs"
        f" {len(findings.node_errors)}, workload errors {len(findings.client_errors)},"
        f" master elections {findings.elections}, spurious failovers"
        f" {len(findings.spurious_failovers)}",
        *(
            f"  {line}"
            for line in (
                findings.crashes
                + findings.node_errors
                + findings.client_errors
                + findings.spurious_failovers
            )[:10]
        ),
        "faults:",
    ]
    for row in findings.unavailability:
        lines.append(
            f"  {row['start_s']:8.1f} s {row['kind']:<12} {','.join(row['targets']):<22}"
            f" {row['role']:<16} window {row['window_s']} s,"
            f" writes back after {row['writes_back_after_s']} s,"
            f" longest gap {row['longest_gap_s']} s"
        )
    for violation in findings.violations:
        lines.append(f"VIOLATION: {violation}")
    return "\n".join(lines) + "\n"


def share(counts: dict[str, int], kind: str) -> str:
    total = sum(counts.values())
    return f"{100 * counts.get(kind, 0) / total:.1f} %" if total else "no sends"


def catch_up_line(catch_up: dict | None) -> str:
    if catch_up is None:
        return "consumers not waited for"
    if catch_up["caught_up"]:
        return f"consumers caught up {catch_up['waited_s']} s after the writers stopped"
    waited, stall, behind = catch_up["waited_s"], catch_up.get("stall_s", 0.0), catch_up["behind"]
    if stall and waited < catch_up["deadline_s"]:
        return f"consumers stuck, no progress for {stall} s (after {waited} s): {behind}"
    return f"consumers not caught up within {catch_up['deadline_s']} s: {behind}"


def plot(path: str, history: History, rows: list[dict]) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 6))
    seconds = [r["second"] for r in rows]
    top.plot(seconds, [r["ok"] for r in rows], label="acknowledged/s")
    top.plot(seconds, [r["errors"] for r in rows], label="errors/s")
    top.set_ylabel("sends per second")
    top.legend(loc="upper right")
    points = [
        (s.completed_s, (s.completed_s - s.invoked_s) * 1000)
        for s in history.sends
        if s.outcome == OK
    ]
    bottom.scatter([p[0] for p in points], [p[1] for p in points], s=2)
    bottom.set_yscale("log")
    bottom.set_ylabel("ack latency (ms)")
    bottom.set_xlabel("seconds since start")
    for fault in history.faults:
        end = fault.end_s if fault.end_s is not None else history.duration_s
        for axis in (top, bottom):
            axis.axvspan(fault.start_s, end, color="red", alpha=0.15)
        top.annotate(fault.kind, (fault.start_s, 0), fontsize=7, rotation=90, va="bottom")
    figure.suptitle(f"ferrymq chaos: {history.mode}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def write(directory: str, history: History, findings: Findings) -> dict:
    rows = series(history)
    result = {
        "mode": history.mode,
        "valid": findings.valid,
        "violations": findings.violations,
        "findings": findings.to_json(),
        "faults": findings.unavailability,
        "series": rows,
    }
    with open(os.path.join(directory, "report.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    history.save(os.path.join(directory, "history.json"))
    text = summary(findings)
    with open(os.path.join(directory, "summary.txt"), "w", encoding="utf-8") as f:
        f.write(text)
    result["summary"] = text
    result["plot"] = plot(os.path.join(directory, "timeline.png"), history, rows)
    return result
