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
    return f"{value:,.0f}" if isinstance(value, int | float) else str(value)


def markdown(report: dict, command: str, chart: str | None) -> str:
    """The RESULTS.md section: table, ratios, durability of each system, machine, load."""
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
    return "\n".join(lines) + "\n"


def write_section(path: str, section: str) -> None:
    """Replace the section in RESULTS.md (up to the next ``## `` heading), or append it."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        text = "# Benchmark results\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.M | re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(path, "w", encoding="utf-8") as f:
        f.write(text.rstrip("\n") + "\n")


def chart(report: dict, path: str) -> None:
    """Grouped bars: throughputs on the left, latencies on the right (log scales)."""
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
