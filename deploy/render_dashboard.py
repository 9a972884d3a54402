"""Draw a Grafana dashboard's panels from a Prometheus server's data, with matplotlib.

Where Grafana itself is not at hand (CI, a README image), this renders each panel of a
dashboard JSON at its grid position: time series from ``query_range``, stats and tables
from an instant query at the end of the window, "No data" where a query returns nothing,
exactly as Grafana would show it. Template variables are set to "All".

    python -m deploy.render_dashboard --prometheus http://127.0.0.1:9090 \\
        --dashboard deploy/grafana/cluster-overview.json --minutes 15 --out overview.png

``--demo SECONDS`` needs no running system: it starts a local 3-node cluster (one broker
group, ``ferrymq.launcher.cluster``), a private Prometheus scraping it every second and the
load of ``deploy.local_stack`` for that long, then renders; ``--demo-outage S`` kills the master
(SIGKILL) at 40 % of the run and restarts it S seconds later, so the failover shows.
``docs/img/dashboard-overview.png`` was made with ``--demo 150 --demo-outage 30``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import re
import signal
import sys
import tempfile
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt

from deploy.prometheus_server import PrometheusServer

BACKGROUND = "#111217"
PANEL = "#181b1f"
TEXT = "#ccccdc"
GRID = "#2c3235"
COLORS = ("#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a")
VARIABLES = {"$broker_group": ".*", "$node": ".*"}


def substitute(expr: str, rate_interval: str) -> str:
    """The query Grafana would send with every variable at "All"."""
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr.replace("$__rate_interval", rate_interval).replace("$__interval", rate_interval)


def legend_of(legend_format: str, labels: dict[str, str]) -> str:
    if not legend_format or legend_format == "__auto":
        inner = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
        return labels.get("__name__", "") + (f"{{{inner}}}" if inner else "") or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), legend_format)


def format_value(value: float, unit: str) -> str:
    if math.isnan(value):
        return "NaN"
    if unit == "percentunit":
        return f"{value * 100:.1f}%"
    if unit == "s":
        return f"{value * 1000:.2f} ms" if abs(value) < 1 else f"{value:.2f} s"
    if unit in ("bytes", "Bps"):
        suffix = "/s" if unit == "Bps" else ""
        for scale, name in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
            if abs(value) >= scale:
                return f"{value / scale:.1f} {name}{suffix}"
        return f"{value:.0f} B{suffix}"
    if unit in ("ops", "reqps"):
        return f"{value:.1f}/s"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.2f} M"
    if abs(value) >= 1e4:
        return f"{value / 1e3:.1f} k"
    return f"{value:.0f}" if value == int(value) else f"{value:.2f}"


def with_gaps(points: list[tuple[float, float]], step_s: float) -> list[tuple[float, float]]:
    """Break the line where Prometheus returned no samples, as Grafana does (it never
    connects across missing points by default): a NaN between points a step apart."""
    out: list[tuple[float, float]] = []
    for point in points:
        if out and point[0] - out[-1][0] > step_s * 1.5:
            out.append((out[-1][0] + step_s, math.nan))
        out.append(point)
    return out


def _style(ax, title: str) -> None:
    ax.set_facecolor(PANEL)
    for spine in ax.spines.values():
        spine.set_color(GRID)
    ax.tick_params(colors=TEXT, labelsize=7)
    ax.set_title(title, color=TEXT, fontsize=9, loc="left", pad=4)


def _no_data(ax) -> None:
    ax.text(
        0.5,
        0.5,
        "No data",
        color="#8e8e8e",
        ha="center",
        va="center",
        fontsize=11,
        transform=ax.transAxes,
    )
    ax.set_xticks([])
    ax.set_yticks([])


def draw_timeseries(ax, panel, prometheus, start, end, step_s, rate_interval) -> int:
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    time_format = "%H:%M" if end - start > 600 else "%H:%M:%S"
    lines = 0
    for target in panel["targets"]:
        expr = substitute(target["expr"], rate_interval)
        for series in prometheus.query_range(expr, start, end, step_s):
            points = with_gaps([(float(t), float(v)) for t, v in series["values"]], step_s)
            if not points:
                continue
            times = [datetime.datetime.fromtimestamp(t, datetime.UTC) for t, _ in points]
            ax.plot(
                times,
                [v for _, v in points],
                linewidth=1.2,
                color=COLORS[lines % len(COLORS)],
                label=legend_of(target.get("legendFormat", ""), series["metric"]),
            )
            lines += 1
    if not lines:
        _no_data(ax)
        return 0
    ax.xaxis.set_major_formatter(mdates.DateFormatter(time_format, tz=datetime.UTC))
    values = [v for line in ax.get_lines() for v in line.get_ydata() if not math.isnan(v)]
    if all(v >= 0 for v in values):
        ax.set_ylim(bottom=0)  # as Grafana does for non-negative series
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: format_value(v, unit)))
    ax.grid(color=GRID, linewidth=0.5)
    ax.legend(
        loc="upper left",
        fontsize=6,
        facecolor=PANEL,
        edgecolor=GRID,
        labelcolor=TEXT,
        ncol=2 if lines > 3 else 1,
        framealpha=0.7,
    )
    return lines


def draw_stat(ax, panel, prometheus, end, rate_interval) -> int:
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
    values = []
    for target in panel["targets"]:
        for series in prometheus.query(substitute(target["expr"], rate_interval), at=end):
            values.append(float(series["value"][1]))
    ax.set_xticks([])
    ax.set_yticks([])
    if not values:
        _no_data(ax)
        return 0
    text = "  ".join(format_value(v, unit) for v in values[:3])
    ax.text(
        0.5,
        0.42,
        text,
        color="#73bf69",
        ha="center",
        va="center",
        fontsize=20,
        fontweight="bold",
        transform=ax.transAxes,
    )
    return len(values)


def draw_table(ax, panel, prometheus, end, rate_interval) -> int:
    rows = []
    for target in panel["targets"]:
        for series in prometheus.query(substitute(target["expr"], rate_interval), at=end):
            labels = {k: v for k, v in series["metric"].items() if k != "__name__"}
            rows.append((labels, float(series["value"][1])))
    ax.set_xticks([])
    ax.set_yticks([])
    if not rows:
        _no_data(ax)
        return 0
    columns = sorted({k for labels, _ in rows for k in labels})
    rows.sort(key=lambda row: -row[1])
    cells = [
        [labels.get(c, "") for c in columns] + [format_value(v, "short")] for labels, v in rows
    ]
    shown = cells[:10]
    table = ax.table(
        cellText=shown, colLabels=[*columns, "Value"], loc="upper center", cellLoc="left"
    )
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    for cell in table.get_celld().values():
        cell.set_facecolor(PANEL)
        cell.set_edgecolor(GRID)
        cell.get_text().set_color(TEXT)
    return len(rows)


def render(
    dashboard: dict,
    prometheus: PrometheusServer,
    start: float,
    end: float,
    out: str,
    rate_interval: str = "30s",
) -> dict[str, int]:
    """Draw every panel; returns the number of series (or values) each one showed."""
    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    width_in, unit_in, header_in = 20.0, 0.42, 0.8
    height_in = rows * unit_in + header_in
    figure = plt.figure(figsize=(width_in, height_in), facecolor=BACKGROUND)

    def rect(pos: dict, stat_like: bool) -> list[float]:
        # Grafana's grid: 24 columns, rows of fixed height; margins leave room for the
        # panel title above and the axis labels below and left of each plot.
        left = 0.6 if not stat_like else 0.15
        bottom = 0.35 if not stat_like else 0.15
        x0 = pos["x"] / 24 * width_in + left
        x1 = (pos["x"] + pos["w"]) / 24 * width_in - 0.15
        y_top = height_in - header_in - pos["y"] * unit_in - 0.3
        y_bottom = height_in - header_in - (pos["y"] + pos["h"]) * unit_in + bottom
        return [
            x0 / width_in,
            y_bottom / height_in,
            (x1 - x0) / width_in,
            (y_top - y_bottom) / height_in,
        ]

    span = (
        time.strftime("%H:%M:%S", time.gmtime(start)),
        time.strftime("%H:%M:%S", time.gmtime(end)),
    )
    figure.suptitle(
        f"{dashboard['title']}   ({span[0]} to {span[1]} UTC, rendered from Prometheus)",
        color=TEXT,
        fontsize=13,
        x=0.03,
        ha="left",
    )
    step_s = max(1.0, (end - start) / 240)
    shown = {}
    for panel in panels:
        pos = panel["gridPos"]
        ax = figure.add_axes(rect(pos, panel["type"] != "timeseries"))
        _style(ax, panel["title"])
        if panel["type"] == "stat":
            shown[panel["title"]] = draw_stat(ax, panel, prometheus, end, rate_interval)
        elif panel["type"] == "table":
            shown[panel["title"]] = draw_table(ax, panel, prometheus, end, rate_interval)
        else:
            shown[panel["title"]] = draw_timeseries(
                ax, panel, prometheus, start, end, step_s, rate_interval
            )
    figure.savefig(out, dpi=80, facecolor=BACKGROUND)
    plt.close(figure)
    return shown


class _RemotePrometheus(PrometheusServer):
    """An already running server, only queried."""

    def __init__(self, url: str) -> None:  # no process of ours
        self.url = url.rstrip("/")


DEMO_SETTINGS = {
    "store": {
        "commitlog_segment_bytes": 8 << 20,
        "consume_queue_entries_per_file": 10000,
        "index_slot_count": 10007,
        "index_entry_count": 40000,
    }
}


def master_of(access: str, group: str = "group-1") -> str:
    from ferrymq.client import Admin

    with Admin(access, timeout_s=5) as admin:
        status = admin.cluster_status()
    return next(g.master for g in status.broker_groups if g.name == group)


def demo(seconds: float, directory: str, outage_s: float = 0.0):
    """A local cluster of three nodes (one broker group, SYNC replication,
    ``ferrymq.launcher.cluster``) under the load of ``deploy.local_stack`` through all three
    addresses, scraped every second. With ``outage_s``, the master is killed (SIGKILL) at
    40 % of the run: a slave takes over and the load goes on through it; the killed node is
    restarted ``outage_s`` later and rejoins as a slave."""
    from deploy.local_stack import Load, prepare
    from deploy.prometheus import scrape_config
    from ferrymq.launcher.cluster import cluster_up

    plan = cluster_up(directory, nodes=3, auto_ports=True, settings=DEMO_SETTINGS)
    with open(os.path.join(directory, "cluster.json"), encoding="utf-8") as f:
        targets = scrape_config.targets_of_cluster(json.load(f))
    prometheus = PrometheusServer.start(
        scrape_config.render(targets, scrape_interval="1s", rule_files=()), rule_files={}
    )
    access = ",".join(n.grpc for n in plan.nodes)
    try:
        prepare(access)
    except BaseException:
        prometheus.stop()
        raise
    load = Load(access).start()
    start = time.time()
    if outage_s > 0:
        time.sleep(seconds * 0.4)
        master = master_of(access)
        pid = next(n.pid for n in plan.nodes if n.id == master)
        os.kill(pid, signal.SIGKILL)
        print(f"demo: killed {master} (master) at +{time.time() - start:.0f} s", flush=True)
        time.sleep(outage_s)
        cluster_up(directory, nodes=3)  # restarts it on its ports and data
        print(f"demo: {master} back at +{time.time() - start:.0f} s", flush=True)
    time.sleep(max(0.0, start + seconds - time.time()))
    return load, prometheus, start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dashboard", default="deploy/grafana/cluster-overview.json")
    parser.add_argument("--out", required=True)
    parser.add_argument("--prometheus", help="URL of a running Prometheus")
    parser.add_argument("--minutes", type=float, default=15)
    parser.add_argument("--rate-interval", default="30s")
    parser.add_argument(
        "--demo",
        type=float,
        metavar="SECONDS",
        help="start nodes, Prometheus and load for this long, then render",
    )
    parser.add_argument(
        "--demo-outage",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="in the demo, kill the master for this long (at 40 %% of the run)",
    )
    args = parser.parse_args(argv)
    with open(args.dashboard, encoding="utf-8") as f:
        dashboard = json.load(f)
    if args.demo:
        from ferrymq.launcher.cluster import cluster_down

        with tempfile.TemporaryDirectory(prefix="ferrymq-demo-") as directory:
            cluster = os.path.join(directory, "cluster")
            load = prometheus = None
            try:
                load, prometheus, start = demo(args.demo, cluster, args.demo_outage)
                shown = render(
                    dashboard, prometheus, start, time.time(), args.out, args.rate_interval
                )
            finally:
                if load is not None:
                    load.stop()
                if prometheus is not None:
                    prometheus.stop()
                if os.path.exists(os.path.join(cluster, "cluster.json")):
                    cluster_down(cluster)
    else:
        if not args.prometheus:
            parser.error("--prometheus or --demo is required")
        end = time.time()
        shown = render(
            dashboard,
            _RemotePrometheus(args.prometheus),
            end - args.minutes * 60,
            end,
            args.out,
            args.rate_interval,
        )
    print(json.dumps(shown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
