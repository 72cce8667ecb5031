// SPDX-License-Identifier: MIT
// How hotpath-defrag's driver spreads a capture over its workers: RSS by ports or by
// addresses, steering each fragment to its datagram's owner, the order in which an
// owner takes its fragments, and workers that start late or not at all.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "driver.hpp"
#include "hotpath/percpu.hpp"
#include "pcap_io.hpp"
#include "synthetic.hpp"
#include "verdict.hpp"

#include "support/defrag_capture_files.hpp"

namespace {

using namespace hotpath::test::defrag_capture;  // data_dir, temp_dir, fs, bytes, counter...

TEST(DefragSpread, FragmentsOfOneDatagramReachDifferentWorkers) {
  auto cap = defrag::pcap_io::read_capture((data_dir / "kernel-seed1.pcapng").string());
  constexpr unsigned workers = 4;
  auto lists = defrag::driver::spread(cap, workers);
  std::map<std::vector<std::uint8_t>, std::set<unsigned>> where;  // datagram key -> workers
  std::size_t total = 0;
  for (unsigned w = 0; w < workers; ++w) {
    total += lists[w].size();
    for (std::uint32_t i : lists[w]) {
      defrag::packet_info pi;
      if (defrag::parse(cap.ip(cap.packets[i]), pi) != defrag::parse_status::ok || !pi.fragment)
        continue;
      auto* k = reinterpret_cast<const std::uint8_t*>(&pi.key);
      where[std::vector<std::uint8_t>(k, k + sizeof pi.key)].insert(w);
    }
  }
  EXPECT_EQ(total, cap.packets.size());
  std::set<std::uint32_t> all;
  for (const auto& l : lists)
    all.insert(l.begin(), l.end());
  EXPECT_EQ(all.size(), cap.packets.size());
  std::size_t split = 0;
  for (const auto& [key, ws] : where)
    split += ws.size() > 1;
  EXPECT_GT(split * 3, where.size()) << split << " of " << where.size() << " datagrams split";
}

// The first kernel-judged capture, the probes, and 300 datagrams of --synthetic (last).
std::vector<defrag::pcap_io::capture> seed_probes_and_synthetic() {
  std::vector<defrag::pcap_io::capture> caps;
  for (const char* f : {"kernel-seed1.pcapng", "kernel-probes1.pcapng"})
    caps.push_back(defrag::pcap_io::read_capture((data_dir / f).string()));
  defrag::synthetic::options so;
  so.datagrams = 300;
  caps.push_back(defrag::synthetic::generate(so).cap);
  return caps;
}

// RSS by addresses alone: every packet still goes to exactly one worker, each datagram's
// fragments all to the one its steering hash picks (so the driver steers nothing), and
// on traffic between many hosts both of 2 workers get some.
TEST(DefragSpread, ByAddressesEachDatagramReachesItsOwner) {
  const auto caps = seed_probes_and_synthetic();
  for (const auto& cap : caps) {
    for (unsigned workers : {2u, 3u, 4u}) {
      auto lists = defrag::driver::spread(cap, workers, defrag::driver::rss_mode::addresses);
      std::set<std::uint32_t> all;
      std::size_t fragments = 0, listed = 0;
      for (unsigned w = 0; w < workers; ++w) {
        all.insert(lists[w].begin(), lists[w].end());
        listed += lists[w].size();
        for (std::uint32_t i : lists[w]) {
          if (const auto h = defrag::driver::steer_hash(cap.ip(cap.packets[i]))) {
            ++fragments;
            EXPECT_EQ(defrag::driver::pick(*h, workers), w) << "packet " << i;
          }
        }
      }
      EXPECT_EQ(all.size(), cap.packets.size());
      EXPECT_EQ(listed, cap.packets.size());  // none twice
      EXPECT_GT(fragments, 50u);
      if (&cap == &caps.back()) {
        EXPECT_FALSE(lists[0].empty());
        EXPECT_FALSE(lists[1].empty());
      }
    }
  }
}

// The engine's queue ranges (config::queues, set to the worker count by the driver)
// line up with the workers at any count: every fragment, at whichever worker RSS or
// steering makes it processed (its owner: pick() of steer_hash()), lies in a bucket of
// that owner's range, so two workers write no bucket line in common (but where two
// ranges meet inside one).
TEST(DefragSpread, EachOwnersDatagramsLieInBucketsOfItsOwn) {
  const auto caps = seed_probes_and_synthetic();
  for (const auto& cap : caps) {
    for (unsigned workers : {2u, 3u, 4u, 5u, 7u, 8u}) {
      defrag::config c;
      c.queues = workers;
      const defrag::engine e(c);
      const std::size_t b = e.initial_config().buckets;
      std::size_t checked = 0;
      for (const auto& r : cap.packets) {
        const auto ip = cap.ip(r);
        defrag::packet_info pi;
        const auto h = defrag::driver::steer_hash(ip);
        if (!h || defrag::parse(ip, pi) != defrag::parse_status::ok || !pi.fragment) continue;
        ++checked;
        const std::size_t owner = defrag::driver::pick(*h, workers), at = e.bucket_index(pi.key);
        EXPECT_GE(at, owner * b / workers) << workers << " workers";
        EXPECT_LT(at, (owner + 1) * b / workers) << workers << " workers";
      }
      EXPECT_GT(checked, 50u);
    }
  }
}

// Receive queues: for each worker count asked for, each worker's packets in its list's
// order, back to back in memory of its own, each packet's bytes those of the capture;
// beside each list, whether RSS hashed the packet with its ports, and where it did not,
// the packet's owner is the worker that received it (steering does not read it).
TEST(DefragSpread, ReceiveQueuesHoldEachWorkersPacketsInItsOwnMemory) {
  std::vector<defrag::pcap_io::capture> caps;
  caps.push_back(defrag::pcap_io::read_capture((data_dir / "kernel-probes1.pcapng").string()));
  defrag::synthetic::options so;
  so.datagrams = 300;
  caps.push_back(defrag::synthetic::generate(so).cap);
  const unsigned counts[] = {2, 1, 3};
  for (const auto& cap : caps) {
    for (auto mode : {defrag::driver::rss_mode::ports, defrag::driver::rss_mode::addresses}) {
      std::size_t l4_set = 0;  // flags set, over the worker counts
      std::size_t unread = 0;  // fragments with the flag clear, whose owner was checked
      const auto qs = defrag::driver::receive(cap, counts, mode);
      ASSERT_EQ(qs.size(), std::size(counts));
      for (std::size_t k = 0; k < qs.size(); ++k) {
        const auto& q = qs[k];
        const unsigned workers = counts[k];
        ASSERT_EQ(q.lists, defrag::driver::spread(cap, workers, mode));
        ASSERT_EQ(q.at.size(), cap.packets.size());
        for (std::size_t i = 0; i < cap.packets.size(); ++i) {
          const auto want = cap.ip(cap.packets[i]);
          const auto got = q.ip(cap, static_cast<std::uint32_t>(i));
          ASSERT_TRUE(std::equal(want.begin(), want.end(), got.begin(), got.end())) << i;
          EXPECT_NE(got.data(), want.data()) << i;
        }
        ASSERT_EQ(q.memory.size(), workers);
        for (unsigned w = 0; w < workers; ++w) {
          const std::uint8_t* next = q.memory[w].data();
          for (std::uint32_t i : q.lists[w]) {
            EXPECT_EQ(q.at[i], next) << workers << " workers: worker " << w << ", packet " << i;
            next += cap.packets[i].length;
          }
          EXPECT_EQ(next, q.memory[w].data() + q.memory[w].size()) << "worker " << w;
          // The descriptor's hash type: set exactly where RSS took the ports in. Where it
          // is not, steering leaves the packet with w without reading it (work()), so
          // its owner must be w.
          ASSERT_EQ(q.l4[w].size(), q.lists[w].size());
          for (std::size_t j = 0; j < q.lists[w].size(); ++j) {
            const auto ip = cap.ip(cap.packets[q.lists[w][j]]);
            const bool ports = mode == defrag::driver::rss_mode::ports &&
                               defrag::driver::rss_hash(ip) != defrag::driver::address_rss_hash(ip);
            EXPECT_EQ(q.l4[w][j] != 0, ports) << "packet " << q.lists[w][j];
            l4_set += q.l4[w][j] != 0;
            const auto h = defrag::driver::steer_hash(ip);
            if (q.l4[w][j] == 0 && h) {
              ++unread;
              EXPECT_EQ(defrag::driver::pick(*h, workers), w)
                  << "packet " << q.lists[w][j] << " would be steered away unread";
            }
          }
        }
      }
      // Both captures hold first fragments with ports (and only by ports are any set),
      // and other fragments.
      EXPECT_EQ(l4_set > 0, mode == defrag::driver::rss_mode::ports);
      EXPECT_GT(unread, 100u);
    }
  }
}

// Steering (the RPS-like handoff): every fragment of a datagram gets the same steering
// hash, so one worker owns it; unfragmented packets get none and stay where RSS put them;
// a fragment without ports is already on its owner (RSS picked the same worker), so only
// first fragments move; and on traffic between many hosts the hash spreads the
// datagrams (both halves of 2 workers used).
TEST(DefragSpread, SteeringHashIsPerDatagram) {
  std::vector<defrag::pcap_io::capture> caps;
  caps.push_back(defrag::pcap_io::read_capture((data_dir / "kernel-seed1.pcapng").string()));
  defrag::synthetic::options so;
  so.datagrams = 300;
  caps.push_back(defrag::synthetic::generate(so).cap);
  for (const auto& cap : caps) {
    std::map<std::vector<std::uint8_t>, std::set<std::uint64_t>> hashes;  // key -> hashes
    std::size_t fragments = 0;
    for (const auto& p : cap.packets) {
      auto ip = cap.ip(p);
      defrag::packet_info pi;
      const bool fragment =
          defrag::parse(ip, pi) == defrag::parse_status::ok && pi.fragment && !pi.atomic;
      auto h = defrag::driver::steer_hash(ip);
      if (!fragment) {
        if (defrag::parse(ip, pi) == defrag::parse_status::ok && !pi.fragment && !pi.atomic) {
          EXPECT_FALSE(h);
        }
        continue;
      }
      ++fragments;
      ASSERT_TRUE(h);
      if (pi.offset != 0) {
        for (std::size_t w = 1; w <= 8; ++w)
          EXPECT_EQ(defrag::driver::pick(*h, w),
                    defrag::driver::pick(defrag::driver::rss_hash(ip), w))
              << "a fragment without ports would be handed off";
      }
      auto* k = reinterpret_cast<const std::uint8_t*>(&pi.key);
      hashes[std::vector<std::uint8_t>(k, k + sizeof pi.key)].insert(*h);
    }
    ASSERT_GT(fragments, 100u);
    std::size_t second = 0;
    for (const auto& [key, hs] : hashes) {
      EXPECT_EQ(hs.size(), 1u) << "the fragments of one datagram steered apart";
      second += defrag::driver::pick(*hs.begin(), 2);
    }
    if (&cap != &caps.front()) {  // the kernel capture is between two hosts only
      EXPECT_GT(second * 5, hashes.size());
      EXPECT_LT(second * 5, hashes.size() * 4);
    }
  }
}

// Traffic between two hosts, built packet by packet for the ordering tests below.
struct two_hosts {
  defrag::synthetic::detail::address a{false, {10, 9, 0, 1}, {10, 9, 0, 2}};
  defrag::pcap_io::capture cap;
  std::int64_t ts = 1'000'000'000;
  std::uint16_t port = 1000;

  // The worker RSS gives `ip` out of `workers`.
  static std::size_t rss(std::span<const std::uint8_t> ip, unsigned workers) {
    return defrag::driver::pick(defrag::driver::rss_hash(ip), workers);
  }
  // Which of 2 workers owns every fragment without ports between the two hosts.
  std::size_t owner() const {
    defrag::pcap_io::capture one;
    const bytes u = defrag::synthetic::detail::udp(a, 1, 9, bytes(100));
    defrag::synthetic::detail::emit_fragment(one, 0, a, 7, std::span(u).subspan(16, 24), 16, true);
    return defrag::driver::pick(*defrag::driver::steer_hash(one.ip(one.packets[0])), 2);
  }
  // A UDP datagram carrying `payload` (from the next free port) whose first fragment of
  // 1480 bytes, ports visible, RSS gives worker `to` of 2.
  bytes datagram_for(std::size_t to, std::uint32_t id, const bytes& payload) {
    for (;;) {
      bytes u = defrag::synthetic::detail::udp(a, ++port, 9, payload);
      defrag::pcap_io::capture one;
      defrag::synthetic::detail::emit_fragment(one, 0, a, id, std::span(u).first(1480), 0, true);
      if (rss(one.ip(one.packets[0]), 2) == to) return u;
    }
  }
  // `count` UDP datagrams of 2000 bytes (datagram d's payload all d), ids from 0x4000,
  // each in two fragments back to back, the first with its ports.
  void split_datagrams(unsigned count, std::size_t size = 2000) {
    const std::size_t cut = size > 1488 ? 1480 : size / 2 & ~std::size_t{7};
    for (unsigned d = 0; d < count; ++d) {
      const bytes u = defrag::synthetic::detail::udp(a, static_cast<std::uint16_t>(1000 + d), 9,
                                                     bytes(size - 8, static_cast<std::uint8_t>(d)));
      defrag::synthetic::detail::emit_fragment(cap, ts += 1000, a, 0x4000 + d,
                                               std::span(u).first(cut), 0, true);
      defrag::synthetic::detail::emit_fragment(cap, ts += 1000, a, 0x4000 + d,
                                               std::span(u).subspan(cut),
                                               static_cast<std::uint32_t>(cut), false);
    }
  }
  // `count` unfragmented UDP packets that RSS gives worker `to` of 2.
  void unfragmented_for(std::size_t to, unsigned count) {
    for (unsigned k = 0; k < count;) {
      const bytes u = defrag::synthetic::detail::udp(a, ++port, 9, bytes(64, 1));
      defrag::pcap_io::capture one;
      defrag::synthetic::detail::emit_fragment(one, 0, a, 1, u, 0, false);
      if (rss(one.ip(one.packets[0]), 2) != to) continue;
      cap.add(ts += 1000, one.ip(one.packets[0]));
      ++k;
    }
  }
};

// An owner takes its datagrams' fragments in capture order, whichever worker RSS gave
// them to. Each datagram: its first fragment (ports visible: RSS gives it to the other
// worker), then a fragment lying inside the first (a duplicate, in this order; the
// other way round an overlap that kills the datagram), then the last one. Between
// datagrams, 300 unfragmented packets for the other worker alone (60000 before the
// first datagram), so that the owner, with little to do, runs ahead and meets each
// tearing fragment before the other has steered the first fragment before it: the
// other steers everything it received before it processes anything, but steering 60000
// packets takes it long enough for the owner to come to the first tearing fragment.
TEST(DefragOrder, OwnerTakesFragmentsInCaptureOrder) {
  using namespace defrag::synthetic::detail;
  two_hosts h;
  const std::size_t owner = h.owner();
  constexpr unsigned datagrams = 40;
  for (unsigned d = 0; d < datagrams; ++d) {
    h.unfragmented_for(1 - owner, d == 0 ? 60000 : 300);
    const std::uint32_t id = 0x4000 + d;
    bytes payload(2000 - 8);
    for (std::size_t i = 0; i < payload.size(); ++i)
      payload[i] = static_cast<std::uint8_t>(d * 7 + i);
    const bytes u = h.datagram_for(1 - owner, id, payload);  // first fragment: the other
    emit_fragment(h.cap, h.ts += 1000, h.a, id, std::span(u).first(1480), 0, true);
    bytes inside(u.begin() + 16, u.begin() + 40);
    inside[0] ^= 0xff;  // other bytes: a duplicate is dropped whatever it holds
    emit_fragment(h.cap, h.ts += 1000, h.a, id, inside, 16, true);
    emit_fragment(h.cap, h.ts += 1000, h.a, id, std::span(u).subspan(1480), 1480, false);
  }
  defrag::driver::run_options o;
  o.window = 1 << 20;
  auto one = defrag::driver::run(h.cap, o);
  ASSERT_EQ(one.first[counter::reasm_oks], datagrams);
  ASSERT_EQ(one.first[counter::reasm_overlaps], 0);
  auto delivered = [](const defrag::driver::run_result& r) {
    std::multiset<std::string> m;
    for (const auto& d : r.out)
      m.insert(std::string(r.datagram(d).begin(), r.datagram(d).end()));
    return m;
  };
  const auto expected = delivered(one);
  for (unsigned threads : {2u, 2u, 2u, 2u, 3u}) {  // the race is run four times at 2
    SCOPED_TRACE(std::to_string(threads) + " workers");
    o.threads = threads;
    auto r = defrag::driver::run(h.cap, o);
    EXPECT_EQ(r.first[counter::reasm_oks], datagrams);
    EXPECT_EQ(r.first[counter::reasm_overlaps], 0);
    EXPECT_GT(r.handed_off, 0);
    EXPECT_TRUE(delivered(r) == expected);
  }
}

// The same, the other way round: the owner's own fragment lying inside the first
// comes first (so Linux kills each datagram), after a run of more than steer_ahead
// packets that the owner does not receive. The other worker, unpaced here, steers the
// first fragment long before; the owner must still take its own fragment first.
TEST(DefragOrder, OwnerTakesItsOwnPacketsBeforeLaterHandoffs) {
  using namespace defrag::synthetic::detail;
  two_hosts h;
  const std::size_t owner = h.owner();
  constexpr unsigned datagrams = 20;
  for (unsigned d = 0; d < datagrams; ++d) {
    // The owner's run ends on a steering burst's boundary (64 packets, 3 per datagram).
    h.unfragmented_for(owner, d == 0 ? 1024 : 1022);
    h.unfragmented_for(1 - owner, 600);
    const std::uint32_t id = 0x4000 + d;
    // Its first fragment RSS gives the other worker.
    const bytes u = h.datagram_for(1 - owner, id, bytes(2000 - 8, static_cast<std::uint8_t>(d)));
    emit_fragment(h.cap, h.ts += 1000, h.a, id, bytes(u.begin() + 16, u.begin() + 40), 16, true);
    emit_fragment(h.cap, h.ts += 1000, h.a, id, std::span(u).first(1480), 0, true);
    emit_fragment(h.cap, h.ts += 1000, h.a, id, std::span(u).subspan(1480), 1480, false);
  }
  defrag::driver::run_options o;
  o.window = std::size_t{1} << 30;  // unpaced: the other worker runs far ahead
  o.skew_ns = std::int64_t{1} << 60;
  auto one = defrag::driver::run(h.cap, o);
  ASSERT_EQ(one.first[counter::reasm_oks], 0);
  ASSERT_EQ(one.first[counter::reasm_overlaps], datagrams);
  o.threads = 2;
  for (int run = 0; run < 5; ++run) {
    auto r = defrag::driver::run(h.cap, o);
    EXPECT_EQ(r.first[counter::reasm_oks], 0) << "run " << run;
    EXPECT_EQ(r.first[counter::reasm_overlaps], datagrams) << "run " << run;
    EXPECT_GT(r.handed_off, 0);
  }
}

// Between two hosts every fragment has one owner, while RSS spreads the first
// fragments by their ports: the other workers own nothing and hand over more than a
// ring holds (at 2 workers; 70000 datagrams of 24 bytes in two fragments), so that they
// steer what is left while they process. They must not hold the owner back (in pace(),
// a worker that owned nothing once stayed at its start, and the owner waited for it
// forever), and what they steer late still reaches the owner in capture order.
TEST(DefragOrder, WorkersOwningNothingDoNotStallTheOwner) {
  two_hosts h;
  constexpr unsigned datagrams = 70000;
  h.split_datagrams(datagrams, 24);
  for (unsigned threads : {2u, 3u, 4u}) {
    SCOPED_TRACE(std::to_string(threads) + " workers");
    defrag::driver::run_options o;
    o.threads = threads;
    auto r = defrag::driver::run(h.cap, o);  // hangs (the test times out) if they stall
    EXPECT_EQ(r.first[counter::reasm_oks], datagrams);
    EXPECT_EQ(r.first[counter::reasm_overlaps], 0);
    EXPECT_GT(r.handed_off, 1024);
    if (threads == 2) {
      EXPECT_GT(r.handed_off, defrag::driver::detail::handoff_ring::max_capacity);
    }
  }
}

// A worker that RSS gives no packet at all must still say that it has steered them all:
// the owner, here that worker, takes the first fragment handed to it and then waits in
// pace() for the other, which waits for that word before it takes anything. (Review: a
// worker whose steering never moved kept its `received` at 0, and both waited forever.)
TEST(DefragOrder, AWorkerGivenNoPacketHoldsNoOneBack) {
  two_hosts h;
  const std::size_t owner = h.owner();
  h.unfragmented_for(1 - owner, 300);
  const bytes u = h.datagram_for(1 - owner, 0x4000, bytes(2000 - 8, 5));
  defrag::synthetic::detail::emit_fragment(h.cap, h.ts += 1000, h.a, 0x4000,
                                           std::span(u).first(1480), 0, true);
  defrag::driver::run_options o;
  o.threads = 2;
  auto r = defrag::driver::run(h.cap, o);  // hangs (the test times out) if it holds them back
  EXPECT_EQ(r.first[counter::passthrough], 300);
  EXPECT_EQ(r.handed_off, 1);
  EXPECT_EQ(r.pending_at_end, 1);
}

// Workers run apart in capture time while memory is plentiful, so expiry follows the
// slowest of them (the low watermark), not the one that sweeps. RSS by addresses: one
// worker owns a datagram whose last fragment comes 0.95 s after its first (timeout 1 s),
// with 200000 packets of its own between them; the other has as many from 1.2 s to
// 1.7 s, and sweeps as it goes. Swept at its own clock, the datagram was gone before
// its owner came to the last fragment (in most runs: the mutant passes only if the
// other worker did not run while the owner held the datagram; with 40000 packets each,
// that happened once in a suite run beside other tests).
TEST(DefragTime, AWorkerAheadDoesNotExpireWhatASlowerOneCompletes) {
  using namespace defrag::synthetic::detail;
  auto worker_of = [](const address& x) {
    defrag::pcap_io::capture one;
    emit_fragment(one, 0, x, 1, udp(x, 1, 9, bytes(8)), 0, false);
    return defrag::driver::pick(defrag::driver::address_rss_hash(one.ip(one.packets[0])), 2);
  };
  const address slow{false, {10, 9, 0, 1}, {10, 9, 0, 2}};
  address fast = slow;
  while (worker_of(fast) == worker_of(slow))
    ++fast.src[2];
  defrag::pcap_io::capture cap;
  const std::int64_t t0 = 1'000'000'000;
  const bytes u = udp(slow, 1000, 9, bytes(2000 - 8, 7));
  emit_fragment(cap, t0, slow, 0x7000, std::span(u).first(1480), 0, true);
  for (int k = 1; k <= 200000; ++k)
    emit_fragment(cap, t0 + k * 4'500, slow, static_cast<std::uint32_t>(k),
                  udp(slow, 2000, 9, bytes(16, 1)), 0, false);
  emit_fragment(cap, t0 + 950'000'000, slow, 0x7000, std::span(u).subspan(1480), 1480, false);
  for (int k = 0; k < 200000; ++k)
    emit_fragment(cap, t0 + 1'200'000'000 + k * 2'500, fast, static_cast<std::uint32_t>(k),
                  udp(fast, 3000, 9, bytes(16, 2)), 0, false);
  defrag::driver::run_options o;
  o.rss = defrag::driver::rss_mode::addresses;
  o.cfg.timeout_v4_ns = o.cfg.timeout_v6_ns = 1'000'000'000;
  for (unsigned threads : {1u, 2u, 2u, 2u, 2u, 2u}) {
    SCOPED_TRACE(std::to_string(threads) + " workers");
    o.threads = threads;
    const auto r = defrag::driver::run(cap, o);
    EXPECT_EQ(r.first[counter::reasm_oks], 1);
    EXPECT_EQ(r.first[counter::reasm_timeout], 0);
    EXPECT_EQ(r.first[counter::passthrough], 400000);
  }
}

// A worker that cannot be started (no memory left for its stack): run() throws the
// error after the workers already started have left. They used to wait at the start
// barrier for the missing one, and the joinable threads ended the process
// (std::terminate) as the error left pass().
TEST(DefragRun, WorkerThatCannotStartIsReported) {
#if HOTPATH_ASAN || HOTPATH_TSAN
  GTEST_SKIP() << "a sanitizer's shadow memory needs more address space than the limit leaves";
#else
  // qemu-user maps the guest's memory itself, and its threads' stacks were not bounded
  // by the limit (every worker started): the emulator's limit, not the program's.
  if (const char* e = std::getenv("HOTPATH_TEST_EMULATED"))
    GTEST_SKIP() << "under " << e << ", RLIMIT_AS does not bound the guest's thread stacks";
  two_hosts h;
  h.split_datagrams(64);
  defrag::driver::run_options o;
  o.threads = 64;
  o.steer = false;  // no rings to allocate: the threads' stacks meet the limit first
  EXPECT_EXIT(
      {
        // Room for a few more 8 MiB stacks, not for 64 (stacks of that size whatever
        // the stack limit: with 256 KiB ones, 64 fit).
        pthread_attr_t attr;
        if (::pthread_attr_init(&attr) != 0 || ::pthread_attr_setstacksize(&attr, 8 << 20) != 0 ||
            ::pthread_setattr_default_np(&attr) != 0)
          ::_exit(3);
        long pages = 0;
        std::ifstream("/proc/self/statm") >> pages;
        const auto in_use =
            static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE));
        rlimit lim{};
        ::getrlimit(RLIMIT_AS, &lim);
        lim.rlim_cur = in_use + (rlim_t{32} << 20);
        if (::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(3);
        try {
          defrag::driver::run(h.cap, o);
          ::_exit(1);  // every worker started: the limit did not bite
        } catch (const std::system_error&) {
          ::_exit(0);
        } catch (...) {
          ::_exit(2);
        }
      },
      ::testing::ExitedWithCode(0), "");
#endif
}

}  // namespace
