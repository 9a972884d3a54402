"""From every system's figures to the ratios, the JSON object, the RESULTS.md section and
the bar chart. Pure functions of the figures (the chart apart), so they are tested on
given numbers."""

from __future__ import annotations

import os
import platform
import re
from dataclasses import dataclass

FERRYMQ = "ferrymq"
SECTION = "## Side-by-side with peers"
ANCHORS_SECTION = "## Failover, topics and backlog beside Kafka and Apache RocketMQ"


@dataclass(frozen=True)
class Workload:
    ratio: str  # the key of ferrymq / best peer in the JSON object
    figure: str  # the Figures field compared
    label: str
    higher_is_better: bool  # throughput; latency otherwise


T, L = True, False  # throughput (higher is better), latency
WORKLOADS = (
    Workload("ratio_sequential_send", "sequential_send_msgs_per_s", "sequential send (msgs/s)", T),
    Workload("ratio_sequential_send_p50", "sequential_send_p50_us", "sequential send p50 (µs)", L),
    Workload("ratio_sequential_send_p99", "sequential_send_p99_us", "sequential send p99 (µs)", L),
    Workload(
        "ratio_256_inflight_send", "inflight_256_send_msgs_per_s", "256 in flight (msgs/s)", T
    ),
    Workload("ratio_batched_send", "batched_send_msgs_per_s", "batched send (msgs/s)", T),
    Workload("ratio_end_to_end_p50", "end_to_end_p50_us", "end to end p50 (µs)", L),
    Workload("ratio_end_to_end_p99", "end_to_end_p99_us", "end to end p99 (µs)", L),
    Workload("ratio_consume", "consume_msgs_per_s", "consume (msgs/s)", T),
)
TARGET_RATIO = 1.5
TARGET_RATIOS = ("ratio_batched_send", "ratio_256_inflight_send")


def ratios(peers: dict[str, dict]) -> dict[str, dict]:
    """For each workload: ferrymq's figure, the best other system's (ferrymq through another
    client, such as ferrymq-official, is not another system), and ferrymq / best
    (best / ferrymq for latencies), so that above 1 always means ferrymq is faster.
    None when ferrymq or every other system lacks the figure."""
    found = {}
    for workload in WORKLOADS:
        ours = peers.get(FERRYMQ, {}).get(workload.figure)
        theirs = {
            name: figures.get(workload.figure)
            for name, figures in peers.items()
            if not name.startswith(FERRYMQ) and figures.get(workload.figure) is not None
        }
        best_name = None
        if theirs:
            pick = max if workload.higher_is_better else min
            best_name = pick(theirs, key=theirs.__getitem__)
        ratio = None
        if ours and best_name is not None and theirs[best_name]:
            ratio = (
                ours / theirs[best_name] if workload.higher_is_better else theirs[best_name] / ours
            )
            ratio = round(ratio, 2)
        found[workload.ratio] = {
            "ratio": ratio,
            "ferrymq": ours,
            "best_peer": best_name,
            "best_peer_value": theirs.get(best_name) if best_name else None,
        }
    return found


def targets(found: dict[str, dict]) -> dict[str, bool]:
    """The issue's targets: ahead of every peer in each workload; ≥ 1.5 on batched and
    256-in-flight throughput."""
    values = [entry["ratio"] for entry in found.values()]
    met = {"ahead_in_every_workload": all(v is not None and v > 1 for v in values)}
    for key in TARGET_RATIOS:
        ratio = found[key]["ratio"]
        met[f"{key}_at_least_{TARGET_RATIO}"] = ratio is not None and ratio >= TARGET_RATIO
    return met


def machine() -> str:
    """CPU model, cores, memory, kernel, Python: what the figures depend on."""
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), ""
            )
        with open("/proc/meminfo", encoding="utf-8") as f:
            kib = int(f.readline().split()[1])
        memory = f"{kib / (1 << 20):.0f} GiB"
    except (OSError, ValueError, IndexError):
        memory = "?"
    return (
        f"{platform.machine()} {model}, {os.cpu_count()} cores, {memory}, Linux "
        f"{platform.release()}, Python {platform.python_version()}"
    )


def build(peers: dict[str, dict], context: dict) -> dict:
    """The one JSON object: every figure, the ratios (also flat, ``ratio_*``), targets."""
    found = ratios(peers)
    report = {name: entry["ratio"] for name, entry in found.items()}
    report.update(
        {
            "targets_met": targets(found),
            "comparison": found,
            "peers": peers,
            **context,
        }
    )
    return report


def _cell(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and value < 10:
        return f"{value:g}"
    return f"{value:,.0f}" if isinstance(value, int | float) else str(value)


def markdown(report: dict, command: str, chart: str | None) -> str:
    """The RESULTS.md section of the five workloads: table, ratios, durability of each
    system, machine, load."""
    return "\n".join(workloads_markdown(report, command, chart)) + "\n"


def anchors_section(report: dict, command: str, chart: str | None) -> str:
    """The RESULTS.md section of the failover, backlog and topics parts that ran."""
    lines = [
        ANCHORS_SECTION,
        "",
        f"`{command}` — each system started by the benchmark on this machine's loopback, "
        "one after the other, a 3-node group each. "
        f"Machine: {report['machine']}. Load average (1/5/15 min) at the start "
        f"{report['load_average_start']}, at the end {report['load_average_end']}. "
        f"Run: {report['mode']}, {report['seconds']} s, {report['started_at']}.",
        *anchors_markdown(report),
    ]
    if chart:
        lines += ["", f"![failover, topics and backlog side by side]({chart})"]
    return "\n".join(lines) + "\n"


def workloads_markdown(report: dict, command: str, chart: str | None) -> list[str]:
    peers = report["peers"]
    names = list(peers)
    lines = [
        SECTION,
        "",
        f"`{command}` — every system started by the benchmark on this machine's loopback, "
        "one after the other, each a 3-node group; 1 KiB bodies; the client (each "
        "system's usual Python library) in the benchmark's process on the same cores.",
        "",
        f"Machine: {report['machine']}. Load average (1/5/15 min) at the start "
        f"{report['load_average_start']}, at the end {report['load_average_end']}. "
        f"Run: {report['mode']}, {report['seconds']} s, {report['started_at']}.",
        "",
        "| workload | " + " | ".join(names) + " | ferrymq / best peer |",
        "|---|" + "---:|" * (len(names) + 1),
    ]
    for workload in WORKLOADS:
        entry = report["comparison"][workload.ratio]
        ratio = entry["ratio"]
        shown = "—" if ratio is None else f"**{ratio:.2f}** ({entry['best_peer']})"
        cells = [_cell(peers[n].get(workload.figure)) for n in names]
        lines.append(f"| {workload.label} | " + " | ".join(cells) + f" | {shown} |")
    lines += ["", "Ratios above 1 mean ferrymq is faster (for latencies: best peer / ferrymq).", ""]
    met = report["targets_met"]
    lines.append(
        "Targets: ferrymq ahead of every peer in each workload — "
        + ("**met**" if met["ahead_in_every_workload"] else "**not met**")
        + "; ≥ 1.5 on batched and 256-in-flight throughput — "
        + ", ".join(
            f"`{k}` {report[k]} {'met' if met[f'{k}_at_least_{TARGET_RATIO}'] else '**not met**'}"
            for k in TARGET_RATIOS
        )
        + "."
    )
    behind = [
        f"{w.label} ({report[w.ratio]})"
        for w in WORKLOADS
        if report[w.ratio] is not None and report[w.ratio] < 1
    ]
    if behind:
        lines += ["", "ferrymq is behind the best peer in: " + "; ".join(behind) + "."]
    lines += [
        "",
        "Durability is not identical: only RabbitMQ fsyncs before confirming; ferrymq waits "
        "for both slaves, NATS for one of two, Redis's WAIT 1 for one replica's memory. "
        "Figures taken while other work ran on the machine move with its load; compare the "
        "columns of one run, not runs with each other.",
    ]
    lines += ["", "What an acknowledgement means for each (durability), and the client:", ""]
    for name in names:
        figures = peers[name]
        if figures.get("available", True):
            lines.append(
                f"- **{name}** ({figures.get('client', '')}): {figures.get('durability', '')}"
            )
        else:
            lines.append(f"- **{name}**: not measured — {figures.get('unavailable_reason', '')}")
        for workload, error in (figures.get("errors") or {}).items():
            lines.append(f"  - {workload} failed: {error}")
    if chart:
        lines += ["", f"![ferrymq and its peers side by side]({chart})"]
    return lines


def _ms(value) -> str:
    return "—" if value is None else f"{value:,.0f}"


def failover_ratios(failover: dict[str, dict]) -> dict[str, dict]:
    """For each other system: its unavailability over ferrymq's (p50 and p99; above 1
    means ferrymq takes writes again sooner), None where either lacks the figure."""
    ours = failover.get(FERRYMQ, {})
    found = {}
    for name, theirs in failover.items():
        if name == FERRYMQ:
            continue
        entry = {}
        for key in ("unavailable_ms_p50", "unavailable_ms_p99"):
            a, b = ours.get(key), theirs.get(key)
            entry[key.replace("unavailable_ms", "ratio")] = round(b / a, 2) if a and b else None
        found[name] = entry
    return found


def failover_markdown(failover: dict[str, dict], drills: int) -> list[str]:
    lines = [
        "",
        "### Failover: kill -9 of the master under a steady producer and consumer",
        "",
        "Each drill waits until all three replicas are in sync, kills the node taking the "
        "writes with SIGKILL (ferrymq's master, the Kafka partition leader, Apache RocketMQ's "
        "master broker) while a producer sends numbered 1 KiB messages one at a time (each "
        "send given up after 3 s) and a consumer reads them; *unavailable* is the time from "
        "the kill to the first acknowledged send the dead node cannot have answered. The "
        "killed process is restarted and rejoins before the next drill. The clients' own "
        "retries and route refreshes are part of what is measured. At the end a fresh "
        "consumer reads the topic from the beginning: *lost* counts acknowledged messages it "
        f"does not find. {drills} drill(s) per system.",
        "",
        "| system | client | unavailable p50 (ms) | p99 (ms) | max (ms) | not recovered "
        "| acknowledged | lost | failed sends |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for name, figures in failover.items():
        if figures.get("available") is False or "drills" not in figures:
            lines.append(f"| {name} | — | — | — | — | — | — | — | — |")
            notes.append(f"- **{name}**: not measured — {figures.get('error', '')}")
            continue
        lines.append(
            f"| {name} | {figures.get('client', '')} | {_ms(figures['unavailable_ms_p50'])} "
            f"| {_ms(figures['unavailable_ms_p99'])} | {_ms(figures['unavailable_ms_max'])} "
            f"| {figures['not_recovered']} | {figures['acknowledged']:,} "
            f"| **{figures['lost']}** | {figures['failed_sends']:,} |"
        )
        killed = ", ".join(
            f"{d['killed']}: {_ms(d['unavailable_ms'])} ms" for d in figures["drills"]
        )
        notes.append(f"- **{name}**: {figures.get('how', '')}. Drills: {killed}.")
        if figures.get("error"):
            notes.append(f"  - {figures['error']}")
    ratios = failover_ratios(failover)
    shown = [
        f"{name} {r['ratio_p50']} (p99 {r['ratio_p99']})"
        for name, r in ratios.items()
        if r["ratio_p50"] is not None
    ]
    if shown:
        lines += [
            "",
            "Unavailability of each system over ferrymq's (above 1: ferrymq takes writes "
            "again sooner): " + "; ".join(shown) + ".",
        ]
    return [*lines, "", *notes]


def topics_markdown(topics: dict[str, dict]) -> list[str]:
    levels = sorted({row["topics"] for f in topics.values() for row in f.get("levels", [])})
    names = list(topics)
    counts = {f.get("messages_per_level") for f in topics.values()} - {None}
    lines = [
        "",
        "### Throughput as the number of topics grows",
        "",
        "Topics created in levels with each system's admin API from the benchmark's process "
        "(one queue/partition each, replicated as the others); at each level "
        f"{', '.join(f'{c:,}' for c in sorted(counts)) or '—'} 1 KiB sends spread "
        "round-robin over every topic so far, 256 in flight, after one untimed send per "
        "topic. msgs/s (and the seconds it took to create that level's new topics).",
        "",
        "| topics | " + " | ".join(names) + " |",
        "|---:|" + "---:|" * len(names),
    ]
    for level in levels:
        cells = []
        for name in names:
            row = next((r for r in topics[name].get("levels", []) if r["topics"] == level), None)
            cells.append(
                "—"
                if row is None
                else f"{row['msgs_per_s']:,}{'*' if row.get('partial') else ''} "
                f"({row['create_s']:.1f} s)"
            )
        lines.append(f"| {level:,} | " + " | ".join(cells) + " |")
    if any(r.get("partial") for f in topics.values() for r in f.get("levels", [])):
        lines += [
            "",
            "\\* the level's sends were not all acknowledged within the wait: the rate of "
            "those that were.",
        ]
    lines += clients_markdown(topics)
    for name, figures in topics.items():
        if figures.get("error"):
            lines.append(f"\n- **{name}** stopped: {figures['error']}")
    return lines


def clients_markdown(part: dict[str, dict]) -> list[str]:
    clients = [f"- **{name}**: {f['client']}" for name, f in part.items() if f.get("client")]
    return ["", "Sent (and read) with:", "", *clients] if clients else []


def backlog_markdown(backlog: dict[str, dict]) -> list[str]:
    lines = [
        "",
        "### A backlog read hot and cold",
        "",
        "One topic of 8 queues/partitions filled with 1 KiB messages (batched sends), read "
        "from the beginning by a fresh consumer while it is in the page cache (hot), then "
        "again after the nodes were stopped, their data files evicted from the page cache "
        "(`posix_fadvise(DONTNEED)` after `fdatasync`; `drop_caches` only if pages remained) "
        "and the nodes started again (cold). *resident* is how much of the nodes' files "
        "was in memory when the cold read began (what their start read back in), in MB and "
        "as a fraction of all their files' pages.",
        "",
        "| system | backlog | fill (msgs/s) | hot (msgs/s) | hot (MB/s) | cold (msgs/s) "
        "| cold (MB/s) | resident MB (fraction) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    errors = []
    for name, figures in backlog.items():
        if figures.get("available") is False:
            errors.append(f"- **{name}**: not measured — {figures.get('error', '')}")
            continue
        for row in figures.get("rows", []):
            size = row["bytes"]
            shown = f"{size / (1 << 30):g} GiB" if size >= 1 << 30 else f"{size >> 20} MiB"
            lines.append(
                f"| {name} | {shown} | {_cell(row.get('fill_msgs_per_s'))} "
                f"| {_cell(row.get('hot_msgs_per_s'))} | {_cell(row.get('hot_mb_per_s'))} "
                f"| {_cell(row.get('cold_msgs_per_s'))} | {_cell(row.get('cold_mb_per_s'))} "
                f"| {_cell(row.get('resident_mb_at_cold_start'))} "
                f"({_cell(row.get('resident_at_cold_start'))}) |"
            )
            if row.get("error"):
                errors.append(f"- **{name}** {shown}: {row['error']}")
            evict = row.get("evict") or {}
            if evict.get("drop_caches") not in (None, "done", "not needed"):
                errors.append(f"- **{name}** {shown}: drop_caches: {evict['drop_caches']}")
    lines += clients_markdown(backlog)
    return lines + (["", *errors] if errors else [])


def anchors_markdown(report: dict) -> list[str]:
    lines: list[str] = []
    if report.get("failover"):
        lines += failover_markdown(report["failover"], report.get("drills", 0))
    if report.get("backlog"):
        lines += backlog_markdown(report["backlog"])
    if report.get("topics"):
        lines += topics_markdown(report["topics"])
    return lines


def write_section(path: str, section: str) -> None:
    """Replace the section in RESULTS.md (its first line, up to the next ``## ``
    heading), or append it."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        text = "# Benchmark results\n"
    heading = section.split("\n", 1)[0]
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.M | re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.rstrip("\n") + "\n")


def chart(report: dict, path: str) -> bool:
    """Grouped bars: throughputs on the left, latencies on the right (log scales)."""
    if not report["peers"]:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    peers = report["peers"]
    names = list(peers)
    panels = (
        ("throughput, msgs/s (higher is better)", [w for w in WORKLOADS if w.higher_is_better]),
        ("latency, µs (lower is better)", [w for w in WORKLOADS if not w.higher_is_better]),
    )
    figure, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / max(1, len(names))
    for axis, (title, workloads) in zip(axes, panels, strict=True):
        for i, name in enumerate(names):
            values = [peers[name].get(w.figure) or 0 for w in workloads]
            positions = [x + (i - (len(names) - 1) / 2) * width for x in range(len(workloads))]
            axis.bar(positions, values, width, label=name)
        axis.set_xticks(range(len(workloads)))
        axis.set_xticklabels([w.label.rsplit(" (", 1)[0] for w in workloads], rotation=15)
        axis.set_yscale("log")
        axis.set_title(title)
        axis.grid(axis="y", alpha=0.3)
    axes[0].legend()
    figure.suptitle(f"ferrymq vs peers, 3 nodes each, 1 KiB ({report['mode']} run)")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True


def topic_curves(topics: dict[str, dict]) -> dict[str, tuple[list[int], list[int]]]:
    """Per system: (topic counts, msgs/s) of the levels it completed."""
    curves = {}
    for name, figures in topics.items():
        rows = figures.get("levels") or []
        if rows:
            curves[name] = ([r["topics"] for r in rows], [r["msgs_per_s"] for r in rows])
    return curves


def backlog_bars(backlog: dict[str, dict]) -> dict[str, dict[str, float]]:
    """Per "system size" label: hot and cold msgs/s (0 where missing)."""
    bars = {}
    for name, figures in backlog.items():
        for row in figures.get("rows") or []:
            size = row["bytes"]
            shown = f"{size / (1 << 30):g}G" if size >= 1 << 30 else f"{size >> 20}M"
            bars[f"{name} {shown}"] = {
                "hot": row.get("hot_msgs_per_s") or 0,
                "cold": row.get("cold_msgs_per_s") or 0,
            }
    return bars


def failover_bars(failover: dict[str, dict]) -> dict[str, tuple[float, float]]:
    """Per system: (p50, p99) unavailability in ms, for the systems that recovered."""
    return {
        name: (f["unavailable_ms_p50"], f["unavailable_ms_p99"])
        for name, f in failover.items()
        if f.get("unavailable_ms_p50") is not None
    }


def growth_chart(report: dict, path: str) -> bool:
    """Failover unavailability (bars), msgs/s against topics (curves), backlog hot and
    cold (bars): one figure; False when none of the three ran."""
    failover = failover_bars(report.get("failover") or {})
    curves = topic_curves(report.get("topics") or {})
    backlog = backlog_bars(report.get("backlog") or {})
    if not (failover or curves or backlog):
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    axis = axes[0]
    names = list(failover)
    for offset, (label, index) in enumerate((("p50", 0), ("p99", 1))):
        positions = [x + (offset - 0.5) * 0.4 for x in range(len(names))]
        axis.bar(positions, [failover[n][index] for n in names], 0.4, label=label)
    axis.set_xticks(range(len(names)))
    axis.set_xticklabels(names, rotation=15)
    axis.set_yscale("log")
    axis.set_title("writes unavailable after kill -9 of the master, ms")
    axis.legend()
    axis = axes[1]
    for name, (xs, ys) in curves.items():
        axis.plot(xs, ys, marker="o", label=name)
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("topics")
    axis.set_title("msgs/s spread over N topics")
    if curves:
        axis.legend()
    axis = axes[2]
    labels = list(backlog)
    for offset, kind in enumerate(("hot", "cold")):
        positions = [x + (offset - 0.5) * 0.4 for x in range(len(labels))]
        axis.bar(positions, [backlog[k][kind] or 0 for k in labels], 0.4, label=kind)
    axis.set_xticks(range(len(labels)))
    axis.set_xticklabels(labels, rotation=15)
    axis.set_yscale("log")
    axis.set_title("backlog consume, msgs/s")
    axis.legend()
    for axis in axes:
        axis.grid(alpha=0.3)
    figure.suptitle(f"failover, topics and backlog, 3 nodes each ({report['mode']} run)")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True
