#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""hotpath-defrag at 1-8 workers, on a quiet machine and beside a busy process.

Writes a clean capture of fragmented UDP datagrams (IPv4, 3 fragments each, raw-IP pcap;
no scapy needed), then runs every case below in each round, in turn, and prints the
median over rounds of wall and CPU ns per fragment, each with its ratio to one worker's
figure on the same input in the same round:

  capture      1, 2, 3, 4, 8 workers (more workers than cores: nobody may spin)
  capture      2 workers with RSS by addresses, 2 workers --shared-nothing (the ceiling)
  busy         1 and 2 workers with one busy loop beside them (a shared core)
  kernel       the 469-fragment kernel-judged capture, 1 and 2 workers
  synthetic    --synthetic, 1 and 4 workers

--spin-mutant also builds hotpath-defrag from a copy of examples/defrag whose waits spin
and never sleep (the design before progress.hpp), and runs every case with it too: the
table must show it collapse where the real build does not.

  scripts/scaling/defrag_workers.py [--build build/release [--build OTHER]] [--rounds 5]
      [--repeat 5]
      [--datagrams 20000] [--spin-mutant] [--json FILE]
"""
import argparse
import json
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def write_capture(path, datagrams, seed=1):
    """`datagrams` UDP datagrams of 2000-4000 bytes, each cut into 3 IPv4 fragments,
    from 64 hosts to one, 10 us apart: a pcap of LINKTYPE_RAW (101)."""
    rnd = random.Random(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101))
        t = 1_700_000_000_000_000  # us
        for n in range(datagrams):
            src = bytes([10, 1, n % 64, 1])
            dst = bytes([10, 2, 0, 1])
            payload = rnd.randbytes(rnd.randrange(2000, 4000))
            udp = struct.pack("!HHHH", 10000 + n % 1000, 9, 8 + len(payload), 0) + payload
            ident = n & 0xFFFF
            cut = (len(udp) // 3) & ~7
            pieces = [(0, udp[:cut]), (cut, udp[cut:2 * cut]), (2 * cut, udp[2 * cut:])]
            for k, (off, data) in enumerate(pieces):
                more = 0x2000 if k < 2 else 0
                hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(data), ident,
                                  more | (off // 8), 64, 17, 0, src, dst)
                hdr = hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:]
                pkt = hdr + data
                t += 3
                f.write(struct.pack("<IIII", t // 1_000_000, t % 1_000_000, len(pkt), len(pkt)))
                f.write(pkt)


def build_spin_mutant(work):
    """hotpath-defrag from a copy of examples/defrag whose waits never sleep."""
    src = os.path.join(work, "examples")
    shutil.copytree(os.path.join(ROOT, "examples", "defrag"), os.path.join(src, "defrag"))
    shutil.copytree(os.path.join(ROOT, "examples", "common"), os.path.join(src, "common"))
    progress = os.path.join(src, "defrag", "progress.hpp")
    text = open(progress, encoding="utf-8").read()
    spin = "if (w.idle < spin_rounds && w.round < max_spin_rounds) {"
    if spin not in text:
        sys.exit("defrag_workers.py: progress.hpp no longer has the line the mutant patches")
    with open(progress, "w", encoding="utf-8") as f:
        f.write(text.replace(spin, "if (true) {  // mutant: spin, never sleep"))
    out = os.path.join(work, "hotpath-defrag-spin")
    subprocess.run(["c++", "-std=c++20", "-O3", "-DNDEBUG", "-pthread", "-I", src, "-I",
                    os.path.join(ROOT, "include"), os.path.join(src, "defrag", "main.cpp"),
                    "-lpcap", "-o", out], check=True)
    return out


def run(defrag, args, busy=False):
    """(wall ns, CPU ns per fragment, sleeps) of one hotpath-defrag run; None if this
    build lacks an option."""
    hog = subprocess.Popen(["sh", "-c", "while :; do :; done"]) if busy else None
    try:
        p = subprocess.run([defrag, *args, "--json", "-"], capture_output=True, text=True,
                           timeout=1800, check=False)
    finally:
        if hog:
            hog.kill()
            hog.wait()
    if p.returncode == 2:  # an option this build does not have (an older one)
        return None
    if p.returncode != 0:
        sys.exit(f"{defrag} {' '.join(args)}: exit {p.returncode}\n{p.stderr}")
    j = json.loads(p.stdout)
    return j["ns_per_fragment"], j["cpu_ns_per_fragment"], j.get("sleeps", 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action="append",
                    help="a build tree holding examples/defrag/hotpath-defrag (repeatable: "
                    "each is run in every round; default build/release)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--datagrams", type=int, default=20000)
    ap.add_argument("--spin-mutant", action="store_true")
    ap.add_argument("--json", help="also write every figure here")
    o = ap.parse_args()

    work = tempfile.mkdtemp(prefix="defrag-workers.")
    try:
        cap = os.path.join(work, "clean.pcap")
        write_capture(cap, o.datagrams)
        kernel = os.path.join(ROOT, "tests", "data", "defrag", "kernel-seed1.pcapng")
        builds = {}
        for b in o.build or [os.path.join(ROOT, "build", "release")]:
            builds[os.path.relpath(b, ROOT)] = os.path.join(b, "examples", "defrag",
                                                            "hotpath-defrag")
        if o.spin_mutant:
            builds["spin mutant"] = build_spin_mutant(work)
        rep = ["--repeat", str(o.repeat)]
        # (row label, input args, workers, extra args, busy, baseline key)
        cases = []
        for t in (1, 2, 3, 4, 8):
            cases.append((f"capture, {t} workers", [cap], t, [], False, "capture"))
        cases.append(("capture, 2 workers, --rss addresses", [cap], 2, ["--rss", "addresses"],
                      False, "capture"))
        cases.append(("capture, 2 workers, --shared-nothing", [cap], 2, ["--shared-nothing"],
                      False, "capture"))
        for t in (1, 2):
            cases.append((f"capture + busy loop, {t} workers", [cap], t, [], True, "busy"))
        for t in (1, 2):
            cases.append((f"kernel capture, {t} workers", [kernel], t, ["--repeat", "41"],
                          False, "kernel"))
        for t in (1, 4):
            cases.append((f"--synthetic, {t} workers", ["--synthetic"], t, [], False,
                          "synthetic"))
        figures = {}  # (build, label) -> [(wall, cpu, sleeps, wall ratio, cpu ratio)]
        for r in range(o.rounds):
            print(f"round {r + 1}/{o.rounds}", file=sys.stderr, flush=True)
            for b, defrag in builds.items():
                base = {}
                for label, inp, t, extra, busy, key in cases:
                    args = inp + ["--threads", str(t)] + (extra if "--repeat" in extra
                                                          else extra + rep)
                    got = run(defrag, args, busy)
                    if got is None:
                        continue
                    wall, cpu, sleeps = got
                    if t == 1:
                        base[key] = (wall, cpu)
                    bw, bc = base[key]
                    figures.setdefault((b, label), []).append(
                        (wall, cpu, sleeps, wall / bw, cpu / bc))
        print(f"\nhotpath-defrag, {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.2f} at the end; medians of {o.rounds} rounds, each case "
              f"--repeat {o.repeat}; x: over one worker on the same input, same round\n")
        print(f"| build | case | wall ns/fragment | x | CPU ns/fragment | x | sleeps |")
        print("|---|---|---|---|---|---|---|")
        for (b, label), v in figures.items():
            med = [statistics.median(x[i] for x in v) for i in range(5)]
            print(f"| {b} | {label} | {med[0]:.0f} | {med[3]:.2f} | {med[1]:.0f} | {med[4]:.2f} "
                  f"| {med[2]:.0f} |")
        if o.json:
            with open(o.json, "w", encoding="utf-8") as f:
                json.dump({f"{b} / {label}": v for (b, label), v in figures.items()}, f, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
