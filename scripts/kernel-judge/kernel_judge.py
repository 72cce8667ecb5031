#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Kernel judge for hotpath-defrag: let this machine's Linux reassemble the 55 fragment
cases of a seed, capture what arrived, and record what the kernel delivered.

    sudo python3 scripts/kernel-judge/kernel_judge.py --seed 2 [--out DIR] [--classic]

writes DIR/kernel-seedN.pcapng (and kernel-seedN.pcap with --classic) and
DIR/kernel-seedN.expected.json; with --probes, kernel-probesN.* of probes.py's cases.
Needs root, iproute2, dumpcap, scapy (python3-scapy); ethtool and editcap are used when
present. Two network namespaces joined by a veth:
the sender (10.77.0.1, fd00:77::1) writes each fragment as an Ethernet frame; the
receiver (10.77.0.2, fd00:77::2, net.ipv4.ipfrag_max_dist=0) reassembles and hands the
datagrams to UDP sockets on port 7777, while dumpcap captures its side of the veth.
"""
import argparse
import hashlib
import json
import os
import random
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

TX, RX = "kj-tx-%d" % os.getpid(), "kj-rx-%d" % os.getpid()  # namespaces
TX_MAC, RX_MAC = "02:00:00:77:00:01", "02:00:00:77:00:02"
SRC4, DST4, SRC6, DST6 = "10.77.0.1", "10.77.0.2", "fd00:77::1", "fd00:77::2"
PORT = 7777


# ------------------------------------------------------------------ the cases


def udp(fam, name, size, sport, rng):
    """The bytes after the IP header of a UDP datagram to port 7777, checksummed: the
    payload is the name (12 bytes, space padded), then random bytes up to size."""
    from scapy.all import IP, UDP, IPv6, Raw

    data = name.ljust(12).encode() + rng.randbytes(size - 12)
    if fam == 4:
        return bytes(IP(src=SRC4, dst=DST4) / UDP(sport=sport, dport=PORT) / Raw(data))[20:]
    return bytes(IPv6(src=SRC6, dst=DST6) / UDP(sport=sport, dport=PORT) / Raw(data))[40:]


def frag(fam, body, ident, off, more, **ip):
    """An IP packet carrying body at offset off of datagram ident (IPv6: always with a
    fragment header). ip: more IPv4 header fields (tos, flags)."""
    from scapy.all import IP, IPv6, IPv6ExtHdrFragment, Raw

    if fam == 4:
        flags = ip.pop("flags", 0) | (1 if more else 0)  # 1: MF
        return IP(src=SRC4, dst=DST4, id=ident, proto=17, flags=flags, frag=off // 8, **ip) / Raw(body)
    return IPv6(src=SRC6, dst=DST6) / IPv6ExtHdrFragment(nh=17, id=ident, offset=off // 8, m=int(more)) / Raw(body)


def split(fam, body, ident):
    """body in fragments of 1480 bytes (IPv4) or 1352 (IPv6: 1400-byte packets); one
    fragment only is an atomic one for IPv6, an unfragmented packet for IPv4."""
    step = 1480 if fam == 4 else 1352
    offs = range(0, len(body), step)
    return [frag(fam, body[o:o + step], ident, o, o + step < len(body)) for o in offs]


def cases(seed):
    """The 55 cases of a seed: [(name, [IP packet])], in sending order except that the
    fragments of the interleaved cases are all shuffled together. Sizes are UDP payload
    bytes. Case k (from 1) has source port 20000 + k, and that IP id but for v4sameid."""
    from scapy.all import Raw

    rng = random.Random(seed)
    out = []

    def add(fam, name, size, arrange=lambda f: f, ident=None):
        ident = ident or 20001 + len(out)
        out.append((name, arrange(split(fam, udp(fam, name, size, 20001 + len(out), rng), ident))))

    for size in (200, 1500, 2900, 4000, 8000, 16000, 40000, 65000):
        add(4, "v4ord%05d" % size, size)
        add(6, "v6ord%05d" % size, size)
    shuffled = lambda f: rng.sample(f, len(f))
    for size in (3000, 9000, 30000):
        add(4, "v4rev%05d" % size, size, lambda f: f[::-1])
        add(4, "v4shf%05d" % size, size, shuffled)
        add(6, "v6shf%05d" % size, size, shuffled)
    add(4, "v4dup", 6000, lambda f: f + f[1:3])  # fragments 2 and 3 again, same bytes
    add(4, "v4miss", 6000, lambda f: f[:2] + f[3:])  # the third fragment never comes
    add(4, "v4sameidA", 4000, ident=4242)  # (the seed-1 capture has 4242 and 4243)
    add(4, "v4sameidB", 4000, ident=4243)
    ident = 20001 + len(out)  # 64 bytes over the end of the first fragment, differing
    overlap = frag(4, b"X" * 64 + rng.randbytes(1416), ident, 1416, True)
    add(4, "v4ovl", 4000, lambda f: f[:1] + [overlap] + f[1:])
    ident = 20001 + len(out)  # 24 bytes wholly inside the first fragment
    add(4, "v4tear", 2000, lambda f: f[:1] + [frag(4, b"T" * 24, ident, 24, True)] + f[1:])
    pod = split(4, b"P" * 66600, 20001 + len(out))  # no UDP header: 66620 bytes of IP
    out.append(("v4pod", pod))
    interleaved = []
    for k in range(20):
        add(4, "v4int%03d" % k, 6500, lambda f: interleaved.extend(f) or [])
    rng.shuffle(interleaved)
    out[-1] = (out[-1][0], interleaved)
    first = lambda f: [frag(4, bytes(f[0][Raw])[:1477], f[0].id, 0, True)] + f[1:]
    add(4, "v4odd", 3000, first)  # a non-last fragment of 1477 bytes
    add(4, "v4whole0064", 64)
    add(4, "v4whole1000", 1000)
    return out


# ------------------------------------------------------------------ the two ends


def case_list(seed, probes):
    if probes:
        import probes as p  # beside this file

        return p.cases(seed)
    return cases(seed)


def send(seed, probes, iface):
    from scapy.all import Ether, conf

    sock = conf.L2socket(iface=iface)
    for _, packets in case_list(seed, probes):
        for p in packets:
            sock.send(Ether(src=TX_MAC, dst=RX_MAC) / p)
            time.sleep(0.001)  # about the pace of the seed-1 capture
    sock.close()


def receive():
    """Prints one JSON line per datagram delivered, in the order they came, until
    SIGTERM."""
    socks = {}
    for fam, af, addr in ((4, socket.AF_INET, "0.0.0.0"), (6, socket.AF_INET6, "::")):
        s = socket.socket(af, socket.SOCK_DGRAM)
        if fam == 6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
        s.bind((addr, PORT))
        socks[s] = fam
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("ready", flush=True)
    while True:
        for s in select.select(list(socks), [], [])[0]:
            data, peer = s.recvfrom(1 << 16)
            d = {"fam": socks[s], "src": peer[0], "sport": peer[1], "len": len(data),
                 "case": data[:12].decode("latin-1"), "sha256": hashlib.sha256(data).hexdigest()}
            print(json.dumps(d), flush=True)


# ------------------------------------------------------------------ the judge


def sh(*cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit("%s: %s" % (" ".join(cmd), r.stderr.strip()))
    return r


def judge(seed, probes, out, classic, wait):
    names = [name for name, _ in case_list(seed, probes)]  # fails early without scapy
    stem = ("kernel-probes%d" if probes else "kernel-seed%d") % seed
    pcapng = out / (stem + ".pcapng")
    procs = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # still clean up
    try:
        for ns in (TX, RX):
            sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", "kjA", "netns", TX, "address", TX_MAC, "type", "veth",
           "peer", "name", "kjB", "netns", RX, "address", RX_MAC)
        for ns, dev, a4, a6 in ((TX, "kjA", SRC4, SRC6), (RX, "kjB", DST4, DST6)):
            ip = ("ip", "netns", "exec", ns)
            sh(*ip, "ip", "addr", "add", a4 + "/24", "dev", dev)
            sh(*ip, "ip", "addr", "add", a6 + "/64", "dev", dev, "nodad")
            if shutil.which("ethtool"):  # no coalescing or segmenting offloads
                sh(*ip, "ethtool", "-K", dev, "gro", "off", "gso", "off", "tso", "off", check=False)
            sh(*ip, "ip", "link", "set", dev, "up")
        sh("ip", "netns", "exec", RX, "sysctl", "-qw", "net.ipv4.ipfrag_max_dist=0")

        rx = ["ip", "netns", "exec", RX]
        me = [sys.executable, os.path.abspath(__file__)]
        recv = subprocess.Popen(rx + me + ["--receive"], stdout=subprocess.PIPE, text=True)
        procs.append(recv)
        if recv.stdout.readline().strip() != "ready":
            sys.exit("the receiver did not start")
        pcapng.unlink(missing_ok=True)
        cap = subprocess.Popen(rx + ["dumpcap", "-i", "kjB", "-f", "ip or ip6", "-w", str(pcapng)],
                               stderr=subprocess.PIPE, text=True)
        procs.append(cap)
        while "Capturing on" not in cap.stderr.readline():
            if cap.poll() is not None:
                sys.exit("dumpcap failed")
        time.sleep(2)  # let the neighbour discovery chatter settle first
        sh("ip", "netns", "exec", TX, *me, "--send", "--seed", str(seed), *(["--probes"] if probes else []))
        time.sleep(wait)  # every datagram the kernel will deliver is delivered by now
        for p in (cap, recv):
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=10)
        delivered = [json.loads(line) for line in recv.stdout.read().splitlines()]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for ns in (TX, RX):
            sh("ip", "netns", "del", ns, check=False)

    pcapng.chmod(0o644)  # dumpcap makes it private
    (out / (stem + ".expected.json")).write_text(
        json.dumps({"seed": seed, "cases": names, "delivered": delivered}, indent=1))
    if classic:
        sh("editcap", "-F", "pcap", str(pcapng), str(pcapng.with_suffix(".pcap")))
    refused = set(names) - {d["case"].strip() for d in delivered}
    print("seed %d: %d cases, %d datagrams delivered; refused: %s"
          % (seed, len(names), len(delivered), " ".join(sorted(refused))))


def main():
    repo = Path(__file__).resolve().parents[2]
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--seed", type=int, default=1)
    a.add_argument("--out", type=Path, default=repo / "tests" / "data" / "defrag")
    a.add_argument("--probes", action="store_true", help="probes.py's cases (kernel-probesN.*)")
    a.add_argument("--classic", action="store_true", help="also write a classic pcap")
    a.add_argument("--wait", type=float, default=3, help="seconds to wait after sending")
    a.add_argument("--send", action="store_true", help=argparse.SUPPRESS)
    a.add_argument("--receive", action="store_true", help=argparse.SUPPRESS)
    args = a.parse_args()
    if args.send:
        send(args.seed, args.probes, "kjA")
    elif args.receive:
        receive()
    else:
        judge(args.seed, args.probes, args.out, args.classic, args.wait)


if __name__ == "__main__":
    main()
