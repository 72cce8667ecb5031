#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Turn the showdown's JSON into SVG plots and a summary of the headline ratios.

Usage: plot.py RESULTS_DIR IMG_DIR
Reads RESULTS_DIR/showdown.json (Google Benchmark) and showdown-machine.json
(benchmarks/peers/run.sh), writes IMG_DIR/showdown-*.svg and
RESULTS_DIR/showdown-summary.md. Every figure is the median of the repetitions.
Needs python3-matplotlib.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams["svg.hashsalt"] = "hotpath-showdown"  # stable ids: diffs show real changes
plt.rcParams["svg.fonttype"] = "none"  # text stays text
plt.rcParams["font.size"] = 9

FAMILY_TITLE = {"lock": "Locks", "counter": "Counters", "rcu": "RCU read side", "table": "Tables"}
PERCENTILES = [("p50_ns", "p50"), ("p90_ns", "p90"), ("p99_ns", "p99"), ("p99.9_ns", "p99.9"),
               ("p99.99_ns", "p99.99"), ("max_ns", "max")]


def load(results):
    with open(os.path.join(results, "showdown.json")) as f:
        data = json.load(f)
    machine = {}
    path = os.path.join(results, "showdown-machine.json")
    if os.path.exists(path):
        with open(path) as f:
            machine = json.load(f)
    # The median aggregate where there were repetitions, else the single run.
    repeated = {b["run_name"] for b in data["benchmarks"] if b.get("run_type") == "aggregate"}
    rows = []
    for b in data["benchmarks"]:
        if b.get("error_occurred"):
            continue
        if b["run_name"] in repeated:
            if b.get("run_type") != "aggregate" or b.get("aggregate_name") != "median":
                continue
        parts = b["run_name"].split("/")
        if len(parts) < 3:
            continue
        args = dict(p.split(":", 1) for p in parts[3:] if ":" in p)
        rows.append({"family": parts[0], "measure": parts[1], "impl": parts[2], "args": args,
                     "b": b})
    return rows, machine, data.get("context", {})


def caption(machine, context):
    cpus = machine.get("cpus", context.get("num_cpus", "?"))
    model = machine.get("cpu_model", "unknown CPU")
    virt = machine.get("virtualisation", "")
    virt = f", {virt} guest" if virt and virt != "none" else ""
    date = machine.get("date", context.get("date", ""))[:16].replace("T", " ")
    load_ = machine.get("load_average_before", "")
    load_after = machine.get("load_average_after", "")
    loads = f"; load avg {load_} before, {load_after} after" if load_ else ""
    return f"{cpus} x {model}{virt}, {machine.get('kernel', '')}; {date} UTC{loads}"


def ns(b, key="cpu_time"):
    unit = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
    return b[key] * unit


def is_hotpath(impl):
    return impl.startswith("hotpath::")


COLOURS = {}  # one colour per implementation across every plot (set in main)


def style(impl, i):
    # hotpath solid and thick, peers dashed.
    colour = COLOURS.get(impl, f"C{i % 10}")
    if is_hotpath(impl):
        return dict(color=colour, linewidth=2.2, linestyle="-", marker="o", markersize=4)
    return dict(color=colour, linewidth=1.2, linestyle="--", marker="s", markersize=3)


def series(rows, family, measure, counter):
    out = {}
    for r in rows:
        if r["family"] == family and r["measure"] == measure and counter in r["b"]:
            out.setdefault(r["impl"], {})[int(r["args"]["threads"])] = r["b"][counter]
    return out


def order(impls):
    # Peers first, hotpath last, so hotpath's lines are drawn on top.
    return sorted(impls, key=lambda s: (is_hotpath(s), s))


def finish(fig, machine, context, path):
    fig.text(0.5, 0.005, caption(machine, context), ha="center", va="bottom", fontsize=7,
             color="0.35")
    fig.savefig(path, metadata={"Date": None})
    plt.close(fig)
    print(f"plot: {path}")


def threads_plot(ax, data, ylabel, title, logy=True):
    for i, impl in enumerate(order(data)):
        pts = sorted(data[impl].items())
        ax.plot([t for t, _ in pts], [max(v, 1e-3) for _, v in pts], label=impl,
                **style(impl, i))
    ax.set_xscale("log", base=2)
    ticks = sorted({t for d in data.values() for t in d})
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel("threads")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)


def plot_family(rows, machine, context, family, measure, img):
    """Throughput, fair ops/s and CPU per operation against threads."""
    tput = series(rows, family, measure, "ops/s")
    if not tput:
        return
    fair = series(rows, family, measure, "fair_ops/s")
    cpu = series(rows, family, measure, "cpu_ns/op")
    name = FAMILY_TITLE.get(family, family)
    fig, axes = plt.subplots(1, 3, figsize=(15, 5.2))
    threads_plot(axes[0], tput, "operations/s, all threads", f"{name}: throughput")
    threads_plot(axes[1], fair, "threads x slowest thread's rate",
                 f"{name}: fair ops/s (what the slowest thread sees)")
    threads_plot(axes[2], cpu, "ns of CPU per operation (all threads)",
                 f"{name}: CPU time per operation")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 6), fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.03, 1, 0.90 if len(labels) > 6 else 0.93))
    finish(fig, machine, context, os.path.join(img, f"showdown-{family}.svg"))


def plot_uncontended(rows, machine, context, img):
    families = [f for f in FAMILY_TITLE if any(
        r["family"] == f and r["measure"] == "uncontended" for r in rows)]
    if not families:
        return
    fig, axes = plt.subplots(1, len(families), figsize=(5 * len(families), 4.6), squeeze=False)
    for ax, fam in zip(axes[0], families):
        vals = {r["impl"]: ns(r["b"]) for r in rows
                if r["family"] == fam and r["measure"] == "uncontended"}
        names = sorted(vals, key=lambda k: vals[k], reverse=True)
        colours = ["C3" if is_hotpath(n) else "0.6" for n in names]
        ax.barh(names, [vals[n] for n in names], color=colours)
        for y, n in enumerate(names):
            ax.text(vals[n], y, f" {vals[n]:.2f}", va="center", fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel("ns of CPU per operation, one thread (log)")
        ax.set_title(f"{FAMILY_TITLE[fam]}: uncontended cost")
        ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    finish(fig, machine, context, os.path.join(img, "showdown-uncontended.svg"))


def plot_latency(rows, machine, context, img, family="lock", measure="latency"):
    lat = [r for r in rows if r["family"] == family and r["measure"] == measure]
    if not lat:
        return
    threads = sorted({int(r["args"]["threads"]) for r in lat})
    shown = [t for t in (2, 8, 16) if t in threads] or threads[-1:]
    fig, axes = plt.subplots(1, len(shown), figsize=(5.2 * len(shown), 5), squeeze=False)
    for ax, t in zip(axes[0], shown):
        here = {r["impl"]: r["b"] for r in lat if int(r["args"]["threads"]) == t}
        for i, impl in enumerate(order(here)):
            b = here[impl]
            ax.plot(range(len(PERCENTILES)), [max(b.get(k, 0), 1) for k, _ in PERCENTILES],
                    label=impl, **style(impl, i))
        ax.set_xticks(range(len(PERCENTILES)))
        ax.set_xticklabels([label for _, label in PERCENTILES])
        ax.set_yscale("log")
        ax.set_ylabel("lock() latency, ns (log)")
        ax.set_xlabel("percentile")
        ax.set_title(f"Lock acquisition latency, {t} threads")
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=6, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.03, 1, 0.88))
    finish(fig, machine, context, os.path.join(img, "showdown-lock-latency.svg"))


def plot_grace(rows, machine, context, img):
    g = [r for r in rows if r["family"] == "rcu" and r["measure"] == "grace"]
    if not g:
        return
    configs = sorted({(int(r["args"]["idle"]), int(r["args"]["busy"])) for r in g},
                     key=lambda c: (c[1], c[0]))
    impls = order({r["impl"] for r in g})
    fig, ax = plt.subplots(figsize=(9, 4.6))
    width = 0.8 / len(impls)
    for i, impl in enumerate(impls):
        p50, p99 = [], []
        for c in configs:
            b = next((r["b"] for r in g if r["impl"] == impl and
                      (int(r["args"]["idle"]), int(r["args"]["busy"])) == c), {})
            p50.append(b.get("p50_ns", 0) / 1e3)
            p99.append(b.get("p99_ns", 0) / 1e3)
        xs = [k + (i - (len(impls) - 1) / 2) * width for k in range(len(configs))]
        ax.bar(xs, p50, width, label=f"{impl} p50", color=COLOURS.get(impl, f"C{i}"))
        ax.scatter(xs, p99, marker="_", s=200, color="black", zorder=3,
                   label="p99" if i == len(impls) - 1 else None)
    ax.set_xticks(range(len(configs)))
    ax.set_xticklabels([f"{idle} idle, {busy} busy readers" for idle, busy in configs])
    ax.set_yscale("log")
    ax.set_ylabel("synchronize latency, us (log); bar p50, dash p99")
    ax.set_title("RCU grace period: synchronize() latency")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    finish(fig, machine, context, os.path.join(img, "showdown-rcu-grace.svg"))


def summary(rows, machine, context):
    """The issue's targets as same-run ratios, in markdown: by wall-clock rate, and by
    CPU time per operation (steadier when other jobs share the machine)."""
    def get(family, measure, impl, counter, threads=None, **args):
        for r in rows:
            if (r["family"], r["measure"], r["impl"]) != (family, measure, impl):
                continue
            if threads is not None and int(r["args"].get("threads", -1)) != threads:
                continue
            if any(int(r["args"].get(k, -1)) != v for k, v in args.items()):
                continue
            return ns(r["b"]) if counter == "cpu_time" else r["b"].get(counter)
        return None

    def ratio(a, b):
        return f"{a / b:.2f}x" if a and b else "n/a"

    out = [f"# Showdown summary\n\n{caption(machine, context)}\n",
           "Medians of the repetitions; every ratio is within this one run. \"by CPU\" "
           "compares CPU time per operation (inverted, so > 1 means hotpath is ahead).\n",
           "| target | measured | ratio | by CPU | met |", "|---|---|---|---|---|"]

    def row(target, measured, r, by_cpu, met):
        out.append(f"| {target} | {measured} | {r} | {by_cpu} | {'yes' if met else 'no'} |")

    def cpu_ratio(family, measure, mine, theirs, t):
        a = get(family, measure, mine, "cpu_ns/op", t)
        b = get(family, measure, theirs, "cpu_ns/op", t)
        return ratio(b, a)

    qn = "hotpath::queued_lock"
    for t in (2, 8, 16):
        mine = get("lock", "contended", qn, "fair_ops/s", t)
        peers = {r["impl"]: r["b"]["fair_ops/s"] for r in rows
                 if r["family"] == "lock" and r["measure"] == "contended"
                 and not is_hotpath(r["impl"]) and int(r["args"]["threads"]) == t}
        if mine is not None and peers:
            best = max(peers, key=peers.get)
            row(f"queued_lock fair ops/s at {t} threads >= best peer's",
                f"{mine:.3g} vs {best} {peers[best]:.3g}", ratio(mine, peers[best]),
                cpu_ratio("lock", "contended", qn, best, t), mine >= peers[best])
    q = get("lock", "uncontended", qn, "cpu_time")
    tas = get("lock", "uncontended", "test-and-set", "cpu_time")
    if q and tas:
        row("queued_lock uncontended <= 1.15x test-and-set", f"{q:.2f} vs {tas:.2f} ns",
            ratio(q, tas), "(is CPU)", q <= 1.15 * tas)
    for t in (2, 8):
        a = get("lock", "contended", qn, "cpu_ns/op", t)
        b = get("lock", "contended", "std::mutex", "cpu_ns/op", t)
        if a and b:
            row(f"queued_lock CPU/op at {t} threads <= std::mutex's", f"{a:.1f} vs {b:.1f} ns",
                ratio(a, b), "(is CPU)", a <= b)
    for peer in ("tbb::ets", "tbb::ets.local()"):
        theirs = get("counter", "contended", peer, "ops/s", 2)
        for impl in ("hotpath::percpu_counter", "hotpath::percpu_stats"):
            mine = get("counter", "contended", impl, "ops/s", 2)
            if mine and theirs:
                row(f"{impl.split('::')[1]} adds/s at 2 threads >= {peer}",
                    f"{mine:.3g} vs {theirs:.3g}", ratio(mine, theirs),
                    cpu_ratio("counter", "contended", impl, peer, 2), mine >= theirs)
    for t in (1, 2):
        mine = get("rcu", "read", "hotpath::rcu_domain", "ops/s", t)
        for peer, times in (("liburcu-memb", 1), ("liburcu-qsbr", 1),
                            ("std::atomic<std::shared_ptr>", 10)):
            theirs = get("rcu", "read", peer, "ops/s", t)
            if mine and theirs:
                c = cpu_ratio("rcu", "read", "hotpath::rcu_domain", peer, t)
                row(f"rcu_domain reads/s at {t} thread(s) >= {'' if times == 1 else '10x '}"
                    f"{peer}", f"{mine:.3g} vs {theirs:.3g}", ratio(mine, theirs), c,
                    mine >= times * theirs)
    # Issue 9's targets for bucket_table, on the showdown's mix (with lookups).
    bt = "hotpath::bucket_table"
    mine = get("table", "contended", bt, "ops/s", 2)
    for peer, times in (("tbb::concurrent_hash_map", 1.5), ("libcuckoo", 1),
                        ("std::mutex+unordered_map", 3)):
        theirs = get("table", "contended", peer, "ops/s", 2)
        if mine and theirs:
            row(f"bucket_table ops/s at 2 threads >= {'' if times == 1 else f'{times:g}x '}{peer}",
                f"{mine:.3g} vs {theirs:.3g}", ratio(mine, theirs),
                cpu_ratio("table", "contended", bt, peer, 2), mine >= times * theirs)
    for t, base, times in ((2, 1, 1.7), (8, 2, 0.9)):
        a = get("table", "contended", bt, "ops/s", t)
        b = get("table", "contended", bt, "ops/s", base)
        if a and b:
            row(f"bucket_table ops/s at {t} threads >= {times:g}x its {base}-thread rate",
                f"{a:.3g} vs {b:.3g}", ratio(a, b), "", a >= times * b)
    for idle, busy in ((0, 0), (8, 0), (0, 2)):
        mine = get("rcu", "grace", "hotpath::rcu_synchronize", "p50_ns", idle=idle, busy=busy)
        memb = get("rcu", "grace", "liburcu-memb", "p50_ns", idle=idle, busy=busy)
        if mine and memb:
            row(f"rcu_synchronize p50 faster than liburcu memb ({idle} idle, {busy} busy)",
                f"{mine / 1e3:.2f} vs {memb / 1e3:.2f} us", ratio(memb, mine) + " faster", "",
                mine < memb)
    mine = get("rcu", "reclaim", "hotpath::rcu_retire", "p50_ns")
    memb = get("rcu", "reclaim", "liburcu-memb call_rcu", "p50_ns")
    if mine and memb:
        row("retire to free p50 <= liburcu memb's call_rcu (3 retires, then nothing)",
            f"{mine / 1e6:.2f} vs {memb / 1e6:.2f} ms", ratio(mine, memb), "", mine <= memb)
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    results, img = sys.argv[1], sys.argv[2]
    os.makedirs(img, exist_ok=True)
    rows, machine, context = load(results)
    # Within a family, hotpath's implementations take Dark2's colours, peers tab10's
    # (dashed); an implementation keeps its colour in every plot.
    dark, light = plt.get_cmap("Dark2").colors, plt.get_cmap("tab10").colors
    for family in {r["family"] for r in rows}:
        impls = {r["impl"] for r in rows if r["family"] == family}
        for k, impl in enumerate(sorted(i for i in impls if is_hotpath(i))):
            COLOURS[impl] = dark[k % len(dark)]
        for k, impl in enumerate(sorted(i for i in impls if not is_hotpath(i))):
            COLOURS[impl] = light[k % len(light)]
    for family, measure in (("lock", "contended"), ("counter", "contended"), ("rcu", "read"),
                            ("table", "contended")):
        plot_family(rows, machine, context, family, measure, img)
    plot_uncontended(rows, machine, context, img)
    plot_latency(rows, machine, context, img)
    plot_grace(rows, machine, context, img)
    text = summary(rows, machine, context)
    with open(os.path.join(results, "showdown-summary.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
