#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Two defrag workers against one, beside the machine's cross-core line transfer.

On a virtual machine the host may run the two vCPUs on cores that share a cache or on
cores far apart, and move them while we run: a cache line then takes tens or hundreds
of nanoseconds to pass between them, and two workers, which share the table, the
steering rings and the pacing positions, gain or lose with it. Each round measures the
transfer (hotpath-bench's baseline/line_transfer), then every --run in turn (each a
`hotpath-defrag ARGS --paired-with 1`: 2 workers' passes paired with 1 worker's in one
process), then the transfer again; rounds whose two transfer figures disagree (the
host moved the vCPUs), or where the transfer's threads did not both run throughout
(a busy machine), are counted apart. For a guest of two vCPUs. Each round also times
one worker pinned to each vCPU in turn: the host may give one vCPU less of a core than
the other (one worker ran up to 1.47x as slow on one as on the other on this guest,
and alike minutes later), and two workers splitting the traffic evenly then gain at
most 2 x fast / slow over one on the fast vCPU; rounds where the two differ by more
than --uneven are counted apart too. With several --build, every --run runs under
each build in turn, in the same round: a change against its baseline, in one machine
state.

  scripts/scaling/defrag_pairs.py [--build build/release [--build OTHER]] [--rounds 20]
      [--run "--synthetic --repeat 9 --threads 2" --run "... --rss addresses"]
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys


def transfer_ns(bench):
    """One line transfer in ns, or None when the threads did not both run throughout
    (CPU time below 90% of wall time: a busy machine, not a placement)."""
    out = subprocess.run([bench, "--benchmark_filter=^baseline/line_transfer",
                          "--benchmark_min_time=0.1", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True).stdout
    b = json.loads(out)["benchmarks"][0]
    if b["cpu_time"] < 0.9 * b["real_time"]:
        return None
    return b["transfer"] * 1e9


def pinned_ns(defrag, cpu):
    """ns per fragment of one worker on `cpu` alone (--synthetic, 5 passes)."""
    out = subprocess.run([defrag, "--synthetic", "--repeat", "5", "--threads", "1",
                          "--json", "-"], check=True, capture_output=True, text=True,
                         preexec_fn=lambda: os.sched_setaffinity(0, {cpu})).stdout
    return json.loads(out[out.index("{"):])["ns_per_fragment"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="append",
                    help="a release build directory (repeatable; default build/release)")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--near-ns", type=float, default=150,
                    help="a transfer below this is 'near', else 'far' (default 150)")
    ap.add_argument("--uneven", type=float, default=1.15,
                    help="a round whose slowest vCPU runs one worker more than this many "
                    "times as slow as its fastest is 'uneven' (default 1.15)")
    ap.add_argument("--run", action="append", help="hotpath-defrag arguments (repeatable)")
    a = ap.parse_args()
    runs = a.run or ["--synthetic --repeat 9 --threads 2"]
    builds = a.build or ["build/release"]
    bench = os.path.join(builds[0], "benchmarks", "hotpath-bench")
    defrags = [(b, os.path.join(b, "examples", "defrag", "hotpath-defrag")) for b in builds]
    speedups = {}  # (run, state) -> [paired_speedup]
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) != 2:
        sys.exit(f"defrag_pairs.py: for a guest of two vCPUs; this process may run on {len(cpus)}")
    for r in range(a.rounds):
        pinned = [pinned_ns(defrags[0][1], c) for c in cpus]
        before = transfer_ns(bench)
        got = []
        for args in runs:
            # Alternating which build goes first: neither gets the later slot every round.
            for build, defrag in (defrags if r % 2 == 0 else defrags[::-1]):
                out = subprocess.run([defrag, *shlex.split(args), "--paired-with", "1",
                                      "--json", "-"], check=True, capture_output=True,
                                     text=True).stdout
                j = json.loads(out[out.index("{"):])
                label = args if len(defrags) == 1 else f"[{build}] {args}"
                got.append((label, j["paired_ns_per_fragment"], j["paired_speedup"]))
        after = transfer_ns(bench)
        if before is None or after is None:
            state = "busy"
        else:
            near = [t < a.near_ns for t in (before, after)]
            state = "moved" if near[0] != near[1] else ("near" if near[0] else "far")
        uneven = max(pinned) / min(pinned)
        if uneven > a.uneven:
            state += " uneven"
        shown = " / ".join("busy" if t is None else f"{t:.0f}" for t in (before, after))
        print(f"round {r + 1}: transfer {shown} ns ({state}); one worker pinned to each vCPU "
              + " / ".join(f"{t:.1f}" for t in pinned)
              + f" ns/fragment: two at most {2 / uneven:.2f}x one on the fastest")
        for args, one, x in got:
            print(f"  {args}: 1 worker {one:.1f} ns/fragment, 2 workers {x:.2f}x")
            speedups.setdefault((args, state), []).append(x)
        sys.stdout.flush()
    print("2 workers' speedup over 1, median (range) by where the vCPUs were:")
    for (args, state), v in sorted(speedups.items()):
        print(f"  {state:12} {len(v):3} rounds  {statistics.median(v):.2f}x "
              f"({min(v):.2f}-{max(v):.2f})  {args}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
