# SPDX-License-Identifier: MIT
"""Edge cases of Linux's reassembly rules beyond the 55 cases of the generator, for
`kernel_judge.py --probes`: one datagram each, its fragments spelled out as
(offset, end[, bytes[, more]]) over the datagram's bytes after the IP header. The
comments say what Linux 6.18 did with them."""
import random

from kernel_judge import frag, split, udp

F, G = 1480, 1352  # bytes per IPv4 / IPv6 fragment


def cases(seed):
    rng = random.Random(seed)
    out = []

    def add(fam, name, size, spec, **ip):
        ident = sport = 20001 + len(out)
        body = udp(fam, name, size, sport, rng)
        frags = []
        for s in spec(body) if callable(spec) else spec:
            off, end = s[0], s[1]
            data = s[2] if len(s) > 2 and s[2] is not None else body[off:end]
            more = s[3] if len(s) > 3 else end < len(body)
            frags.append(frag(fam, data, ident, off, more, **ip))
        out.append((name, frags))
        return body

    # Duplicates before completion are dropped (delivered).
    add(4, "p4dupin", 4000, [(0, F), (F, 2 * F), (F, 2 * F), (2 * F, 4008)])
    add(4, "p4duplast", 4000, [(2 * F, 4008), (2 * F, 4008), (0, F), (F, 2 * F)])
    # Wholly inside one run (fragments appended in order) is a duplicate, even across
    # two fragments (delivered); across two runs it is an overlap (refused).
    add(4, "p4spanrun", 4000, [(0, F), (F, 2 * F), (744, 2224), (2 * F, 4008)])
    add(4, "p4span2run", 4000, [(F, 2 * F), (0, F), (744, 2224), (2 * F, 4008)])
    add(4, "p4spanrev", 4000, [(2 * F, 4008), (F, 2 * F), (0, F - 8), (744, 2224), (F - 8, F)])
    add(4, "p4inside2", 4000, lambda b: [(0, F), (F, 2 * F), (F + 64, F + 128, b"T" * 64), (2 * F, 4008)])
    add(4, "p4insideX", 4000, lambda b: [(F, 2 * F), (0, F), (F - 64, F + 64, b"T" * 128), (2 * F, 4008)])
    # Same range, other bytes: a duplicate, the first one's bytes are kept (delivered).
    add(4, "p4samerange", 4000, lambda b: [(0, F), (0, F, b"S" * F), (F, 2 * F), (2 * F, 4008)])
    # Partial overlaps kill the datagram, even with the same bytes (refused).
    add(4, "p4ovlsame", 4000, [(0, F), (F - 64, 2 * F - 64), (F, 2 * F), (2 * F, 4008)])
    add(4, "p4ovlfirst", 4000, lambda b: [(F - 64, 2 * F - 64, b"X" * F), (0, F), (F, 2 * F), (2 * F, 4008)])
    add(4, "p4ovltail", 4000, [(0, F), (F, 2 * F), (2 * F, 4008), (2 * F - 8, 4008)])  # complete first
    # IPv4 rounds a non-last fragment's end down to 8 (delivered when the next covers it);
    # to nothing, it kills the datagram (refused).
    add(4, "p4trim", 3000, [(0, 1477), (1472, 2952), (2952, 3008)])
    add(4, "p4trimmid", 6000, [(0, F), (F, 2 * F - 5), (2 * F - 8, 3 * F - 8), (3 * F - 8, 4 * F - 8), (4 * F - 8, 6008)])
    add(4, "p4trimbad", 3000, lambda b: [(0, 1477, b[:1472] + b"ZZZZZ"), (1472, 2952), (2952, 3008)])
    add(4, "p4trimzero", 3000, [(0, F), (F, F + 5), (F, 2 * F), (2 * F, 3008)])
    add(4, "p4odd7", 3000, [(0, F), (F, F + 7, None, True), (F, 2 * F), (2 * F, 3008)])
    # Length rules: another last fragment, or one beyond the last, or an empty last
    # fragment kill the datagram (refused); the last one first is fine (delivered).
    add(4, "p4lastdiff", 4000, [(2 * F, 4008), (0, F), (2 * F, 4000, None, False), (F, 2 * F)])
    add(4, "p4beyond", 4000, [(2 * F, 4008), (0, F), (4008, 4016, b"B" * 8, True), (F, 2 * F)])
    add(4, "p4zerolast", 2000, [(0, F), (F, 2008, None, True), (2008, 2008, b"", False)])
    add(4, "p4lastfirst", 4000, [(2 * F, 4008), (0, F), (F, 2 * F)])
    # A killed datagram's id, sent again at once: a new datagram (delivered).
    body = add(4, "p4rekill", 4000, lambda b: [(0, F), (F - 64, 2 * F - 64, b"X" * F)])
    out.append(("p4rekill2", split(4, body, 20001 + len(out) - 1)))
    # Two datagrams with one key, interleaved: the second one's fragments are duplicates
    # (A delivered, B refused).
    a, b = (udp(4, n, 4000, p, rng) for n, p in (("p4sameA", 30001), ("p4sameB", 30002)))
    fa, fb = split(4, a, 4242), split(4, b, 4242)
    out += [("p4sameA", [p for pair in zip(fa, fb) for p in pair]), ("p4sameB", [])]
    # ECN: not-ECT with ECT refused; CE with ECT delivered (CE). DF: delivered.
    add(4, "p4ecnmix", 3000, [(0, F), (F, 2 * F), (2 * F, 3008)], tos=1)
    out[-1][1][1].tos = 0
    add(4, "p4ecnce", 3000, [(0, F), (F, 2 * F), (2 * F, 3008)], tos=2)
    out[-1][1][0].tos = 3
    add(4, "p4df", 3000, [(0, F), (F, 2 * F), (2 * F, 3008)], flags=2)
    # Largest datagrams (delivered), and one byte more (refused).
    add(4, "p4max", 65507, lambda b: [(o, min(o + F, len(b))) for o in range(0, len(b), F)])
    out.append(("p4over1", split(4, b"Q" * 65516, 20001 + len(out))))
    add(6, "p6max", 65527, lambda b: [(o, min(o + G, len(b))) for o in range(0, len(b), G)])
    out.append(("p6over1", split(6, b"Q" * 65536, 20001 + len(out))))
    # IPv6: the same run rules; a non-last fragment not a multiple of 8 long is dropped
    # alone (refused, or delivered when sent again right); an empty one kills.
    add(6, "p6dupin", 4000, [(0, G), (G, 2 * G), (G, 2 * G), (2 * G, 4008)])
    add(6, "p6spanrun", 4000, [(0, G), (G, 2 * G), (600, 2000), (2 * G, 4008)])
    add(6, "p6span2run", 4000, [(G, 2 * G), (0, G), (600, 2000), (2 * G, 4008)])
    add(6, "p6ovl", 4000, lambda b: [(0, G), (G - 64, 2 * G - 64, b"X" * G), (G, 2 * G), (2 * G, 4008)])
    add(6, "p6tear", 4000, lambda b: [(0, G), (24, 48, b"T" * 24), (G, 2 * G), (2 * G, 4008)])
    add(6, "p6odd", 3000, [(0, G - 3), (G, 2 * G), (2 * G, 3008)])
    add(6, "p6oddfix", 3000, [(0, G - 3, None, True), (G, 2 * G), (2 * G, 3008), (0, G)])
    add(6, "p6lastdiff", 4000, [(2 * G, 4008), (0, G), (2 * G, 4000, None, False), (G, 2 * G)])
    add(6, "p6zero", 3000, [(0, G), (G, G, b"", True), (G, 2 * G), (2 * G, 3008)])
    add(6, "p6trimbad", 3000, [(0, G - 3), (G - 8, 2 * G - 8), (2 * G - 8, 3008)])
    # Many small fragments (delivered).
    add(4, "p4tiny", 8000, lambda b: [(o, min(o + 64, len(b))) for o in range(0, len(b), 64)])
    add(6, "p6tiny", 8000, lambda b: [(o, min(o + 64, len(b))) for o in range(0, len(b), 64)][::-1])
    # A fragment header after one that was processed (an atomic fragment's, or inside a
    # reassembled datagram): Linux drops the packet (IP6SKB_FRAGMENTED; refused, all three).
    from scapy.all import IPv6, IPv6ExtHdrFragment, Raw

    from kernel_judge import DST6, SRC6

    def nested(name, size, build):
        ident = sport = 20001 + len(out)
        body = udp(6, name, size, sport, rng)
        fh = lambda nh, off, more, i=ident: IPv6ExtHdrFragment(nh=nh, id=i, offset=off // 8, m=int(more))
        out.append((name, [IPv6(src=SRC6, dst=DST6) / h / Raw(d) for h, d in build(body, fh)]))

    nested("p6nestatom", 1000, lambda b, fh: [(fh(44, 0, False) / fh(17, 0, False, 7), b)])
    def carried(b, fh):  # a datagram whose payload starts with an atomic fragment's header
        d = bytes(fh(17, 0, False, 7)) + b
        return [(fh(44, o, o + G < len(d)), d[o:o + G]) for o in range(0, len(d), G)]

    nested("p6nestin", 2000, carried)
    nested("p6nestfirst", 2000, lambda b, fh: [(fh(44, 0, False) / fh(17, 0, True), b[:G]),
                                                (fh(17, G, False), b[G:])])
    return out
