// SPDX-License-Identifier: MIT
#include "hotpath/percpu_counter.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "support/cpus.hpp"
#include "support/stress.hpp"

extern char** environ;

namespace hotpath::test {
namespace {

using namespace std::chrono_literals;

static_assert(std::is_default_constructible_v<percpu_stats<3>>);
static_assert(!std::is_copy_constructible_v<percpu_counter<>>);

int sign(std::int64_t x) {
  return x > 0 ? 1 : (x < 0 ? -1 : 0);
}

// Moves the given threads between cpus (pinning each to one cpu, rotating, and
// now and then releasing it to all) until stop() is called. Threads that have
// already exited are skipped by the kernel (ESRCH): they must not be joined yet.
class affinity_flipper {
 public:
  explicit affinity_flipper(std::vector<pthread_t> threads)
      : threads_(std::move(threads)), cpus_(allowed_cpus()), th_([this] { run(); }) {}
  ~affinity_flipper() { stop(); }
  std::uint64_t stop() {
    stop_.store(true, std::memory_order_relaxed);
    if (th_.joinable()) th_.join();
    return flips_;
  }
  // Until the first round of moves is done: a test starts its threads' work after
  // it, so that they are moved at least once however late this thread first runs.
  void wait_first_round() const {
    while (!first_round_.load(std::memory_order_acquire))
      std::this_thread::yield();
  }

 private:
  void run() {
    std::size_t k = 0;
    while (!stop_.load(std::memory_order_relaxed) || k == 0) {
      for (std::size_t t = 0; t < threads_.size(); ++t) {
        cpu_set_t set;
        CPU_ZERO(&set);
        if ((k + t) % 5 == 4) {
          for (unsigned c : cpus_)
            CPU_SET(c, &set);
        } else {
          CPU_SET(cpus_[(k + t) % cpus_.size()], &set);
        }
        if (pthread_setaffinity_np(threads_[t], sizeof set, &set) == 0) ++flips_;
      }
      if (k++ == 0) first_round_.store(true, std::memory_order_release);
      std::this_thread::sleep_for(300us);
    }
  }

  std::vector<pthread_t> threads_;
  std::vector<unsigned> cpus_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> first_round_{false};
  std::uint64_t flips_ = 0;
  std::thread th_;
};

enum class paths { rseq, portable, mixed };

struct stress_config {
  unsigned threads;
  paths path;
  std::int64_t batch;
  std::uint64_t iters;
  std::chrono::milliseconds budget;
};

// `threads` threads add a mix of positive and negative values to one counter and
// packets/bytes/drops to one percpu_stats<3>, while being moved between cpus; a
// third of them stop early and exit long before the others. Afterwards sum() and
// snapshot() must equal what the threads say they added, exactly.
void exact_under_migration(const stress_config& cfg) {
  percpu_counter<> counter;
  counter.set_batch(cfg.batch);
  percpu_stats<3> stats;
  std::vector<std::int64_t> added(cfg.threads), packets(cfg.threads), bytes(cfg.threads),
      drops(cfg.threads);
  std::vector<int> fast(cfg.threads);
  std::atomic<unsigned> ready{0}, finished{0};
  std::atomic<bool> go{false};
  // Starts once every thread runs: set before `go`, read after it.
  std::chrono::steady_clock::time_point deadline;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < cfg.threads; ++t) {
    pool.emplace_back([&, t] {
      set_rseq_fast_path(cfg.path == paths::rseq || (cfg.path == paths::mixed && t % 2 == 0));
      fast[t] = rseq_fast_path();
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire))
        std::this_thread::yield();
      const std::uint64_t iters = stress_scaled(cfg.iters);
      const std::uint64_t limit = t % 3 == 0 ? iters / 16 : iters;
      std::int64_t sum = 0, p = 0, b = 0, d = 0;
      for (std::uint64_t i = 0; i < limit; ++i) {
        // Every thread does some work, even one first scheduled after the deadline.
        if (i % 256 == 255 && std::chrono::steady_clock::now() > deadline) break;
        const auto v = static_cast<std::int64_t>(i % 7) - 2;  // -2..4
        counter.add(v);
        sum += v;
        if (i % 5 == 0) {
          counter.dec();
          --sum;
        }
        stats.inc(0);
        ++p;
        const auto len = static_cast<std::int64_t>(64 + i % 1400);
        stats.add(1, len);
        b += len;
        if (i % 10 == 0) {
          stats.inc(2);
          ++d;
        }
      }
      added[t] = sum;
      packets[t] = p;
      bytes[t] = b;
      drops[t] = d;
      finished.fetch_add(1, std::memory_order_release);
    });
  }
  while (ready.load() < cfg.threads)
    std::this_thread::yield();
  std::vector<pthread_t> handles;
  for (auto& th : pool)
    handles.push_back(th.native_handle());
  affinity_flipper flipper(handles);
  flipper.wait_first_round();
  deadline = std::chrono::steady_clock::now() + stress_scaled(cfg.budget);
  go.store(true, std::memory_order_release);
  // The early third exit while the rest run on: join nobody until all are done,
  // so the flipper never touches a reused thread handle.
  while (finished.load(std::memory_order_acquire) < cfg.threads)
    std::this_thread::sleep_for(1ms);
  const std::uint64_t flips = flipper.stop();
  for (auto& th : pool)
    th.join();

  std::int64_t want = 0, want_p = 0, want_b = 0, want_d = 0;
  for (unsigned t = 0; t < cfg.threads; ++t) {
    want += added[t];
    want_p += packets[t];
    want_b += bytes[t];
    want_d += drops[t];
  }
  EXPECT_GT(flips, 0u);
  EXPECT_GT(want_p, 0);
  EXPECT_EQ(counter.sum(), want);
  EXPECT_LE(detail::distance(counter.read(), want),
            static_cast<std::uint64_t>(counter.error_bound()));
  const std::array<std::int64_t, 3> snap = stats.snapshot();
  EXPECT_EQ(snap[0], want_p);
  EXPECT_EQ(snap[1], want_b);
  EXPECT_EQ(snap[2], want_d);
  EXPECT_EQ(stats.sum(1), want_b);
  // Did the threads take the path the test asked for?
  for (unsigned t = 0; t < cfg.threads; ++t) {
    const bool want_fast = HOTPATH_RSEQ && rseq_available() &&
                           (cfg.path == paths::rseq || (cfg.path == paths::mixed && t % 2 == 0));
    EXPECT_EQ(fast[t] != 0, want_fast) << "thread " << t;
  }
}

// Iterations are bounded by time too; sanitizer builds get through fewer.
constexpr std::uint64_t stress_iters = 4000000;

TEST(PercpuCounter, ExactUnderMigrationOnTheDefaultPath) {
  exact_under_migration({8, paths::rseq, percpu_counter<>::default_batch(), stress_iters, 1500ms});
}

TEST(PercpuCounter, ExactUnderMigrationOnTheForcedPortablePath) {
  exact_under_migration(
      {8, paths::portable, percpu_counter<>::default_batch(), stress_iters, 1500ms});
}

TEST(PercpuCounter, ExactWithBothPathsOnOneCounter) {
  exact_under_migration({8, paths::mixed, 8, stress_iters, 1500ms});
}

// The rseq stress: batch 2 folds every other add, so the take sequence runs as
// often as the add sequence; 12 threads on 2 cpus are preempted and migrated inside
// both. (Under sanitizers this exercises the portable path instead.)
TEST(PercpuCounter, RseqStressTinyBatch) {
  if (HOTPATH_RSEQ && !rseq_available()) GTEST_SKIP() << "rseq not registered by glibc here";
  exact_under_migration({12, paths::rseq, 2, stress_iters, 2000ms});
}

TEST(PercpuCounter, FastPathUsesRseqWordsAndForcedFallbackThePortableOnes) {
  percpu_counter<> c;
  c.set_batch(std::int64_t{1} << 40);  // no folds: everything stays in the words
  std::thread([&] {
    for (int i = 0; i < 100; ++i)
      c.inc();
  }).join();
  std::thread([&] {
    set_rseq_fast_path(false);
    EXPECT_FALSE(rseq_fast_path());
    for (int i = 0; i < 50; ++i)
      c.inc();
  }).join();
  const auto u = c.unfolded();
  if (HOTPATH_RSEQ && rseq_available()) {
    EXPECT_EQ(u.rseq, 100);
    EXPECT_EQ(u.portable, 50);
  } else {
    std::printf("rseq fast path not in this build (sanitizer or no rseq): portable only\n");
    EXPECT_EQ(u.rseq, 0);
    EXPECT_EQ(u.portable, 150);
  }
  EXPECT_EQ(c.read(), 0);
  EXPECT_EQ(c.sum(), 150);
}

TEST(PercpuCounter, SingleThreadBasics) {
  percpu_counter<> c(10);
  EXPECT_EQ(c.batch(), std::max<std::int64_t>(32, 2 * std::int64_t{possible_cpus()}));
  EXPECT_EQ(c.slots(), possible_cpus());
  EXPECT_EQ(c.sum(), 10);
  for (int i = 0; i < 1000; ++i)
    c.inc();
  for (int i = 0; i < 300; ++i)
    c.dec();
  c.add(-5000);
  EXPECT_EQ(c.sum(), 10 + 700 - 5000);
  EXPECT_LE(detail::distance(c.read(), c.sum()), static_cast<std::uint64_t>(c.error_bound()));
  // A big add folds at once.
  c.add(1'000'000);
  EXPECT_LE(detail::distance(c.read(), std::int64_t{1'000'000 + 10 + 700 - 5000}),
            static_cast<std::uint64_t>(c.error_bound()));
  const std::int64_t first_bound = c.error_bound();
  c.set_batch(1);
  EXPECT_EQ(c.batch(), 1);
  // Words filled under the old batch keep their deltas: the bound stays the old one.
  EXPECT_EQ(c.error_bound(), first_bound);
  const std::int64_t before = c.sum();
  c.inc();  // with batch 1 every add folds, but only the current cpu's word goes with it
  EXPECT_EQ(c.sum(), before + 1);
  EXPECT_LE(detail::distance(c.read(), c.sum()), static_cast<std::uint64_t>(c.error_bound()));
  percpu_counter<std::uint32_t> u;
  u.dec();
  EXPECT_EQ(u.sum(), 0xffffffffu);
  u.inc();
  EXPECT_EQ(u.sum(), 0u);
}

// set_batch() lowering the batch: the words filled under the old one keep deltas up
// to the old batch - 1, and compare() must still fall back to sum() for them.
TEST(PercpuCounter, CompareRightAfterTheBatchIsLowered) {
  percpu_counter<> c;
  const std::vector<unsigned> cpus = allowed_cpus();
  const std::size_t used = std::min<std::size_t>(cpus.size(), 2);
  ASSERT_GE(used, 1u);
  for (std::size_t i = 0; i < used; ++i) {
    std::thread([&, i] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpus[i], &set);
      EXPECT_EQ(pthread_setaffinity_np(pthread_self(), sizeof set, &set), 0);
      c.add(30);  // below the default batch: stays in this cpu's word
    }).join();
  }
  const auto total = static_cast<std::int64_t>(30 * used);
  ASSERT_EQ(c.sum(), total);
  ASSERT_EQ(c.read(), 0);
  c.set_batch(1);
  EXPECT_GE(c.error_bound(), total);
  for (std::int64_t rhs = -2; rhs <= total + 2; ++rhs)
    EXPECT_EQ(c.compare(rhs), sign(total - rhs)) << "rhs " << rhs;
  c.set_batch(8);  // raising it again keeps the largest
  EXPECT_GE(c.error_bound(), total);
}

// A batch so large that words * slots * (batch - 1) overflows: the bound saturates.
TEST(PercpuCounter, ErrorBoundSaturates) {
  percpu_counter<> c;
  c.set_batch(std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(c.error_bound(), std::numeric_limits<std::int64_t>::max());
  c.add(5);
  EXPECT_EQ(c.compare(4), 1);
  EXPECT_EQ(c.compare(5), 0);
  EXPECT_EQ(c.compare(6), -1);
}

// Unsigned counters: dec() is a delta of -1, not 2^32 - 1, so it does not fold.
TEST(PercpuCounter, UnsignedDecrementIsASmallDelta) {
  percpu_counter<std::uint32_t> u(10);
  u.dec();
  u.dec();
  u.inc();
  EXPECT_EQ(u.sum(), 9u);
  EXPECT_EQ(u.read(), 10u) << "a decrement of an unsigned counter folded";
  const auto d = u.unfolded();
  EXPECT_EQ(d.rseq + d.portable, -1);
  percpu_counter<std::uint64_t> w;
  w.dec();
  EXPECT_EQ(w.read(), 0u);
  EXPECT_EQ(w.sum(), ~std::uint64_t{0});
}

// The portable path with |v| >= batch, so every add folds, contended by more threads
// than cpus: a folder may hold only one word (|w| < batch) plus its own v, never
// another thread's v. So at any moment read() lags the exact value by at most
// error_bound() + (batch - 1 + v) per add in progress. Half the threads add without
// pause (preempted inside add(), they are the folders); the other half add now and
// then and are mostly idle, so their adds must be in the centre once done.
TEST(PercpuCounter, PortableFolderHoldsOnlyItsOwnDelta) {
  percpu_counter<> c;
  constexpr std::int64_t batch = 4, v = 1000;
  c.set_batch(batch);
  constexpr unsigned threads = 8;
  struct alignas(cache_line_size) progress {
    std::atomic<std::int64_t> started{0};
    std::atomic<std::int64_t> done{0};
  };
  std::vector<progress> p(threads);
  std::atomic<bool> stop{false};
  std::atomic<unsigned> running{0};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      set_rseq_fast_path(false);
      running.fetch_add(1, std::memory_order_relaxed);
      for (std::int64_t i = 1; !stop.load(std::memory_order_relaxed) && i < 20'000'000; ++i) {
        p[t].started.store(i, std::memory_order_seq_cst);
        c.add(v);
        p[t].done.store(i, std::memory_order_seq_cst);
        if (t % 2 == 1) std::this_thread::sleep_for(20us);
      }
    });
  }
  std::vector<std::int64_t> d1(threads);
  std::uint64_t checks = 0;
  // 1.5 s from when every adder runs, and at least the checks counted below.
  while (running.load(std::memory_order_relaxed) < threads)
    std::this_thread::yield();
  const auto deadline = std::chrono::steady_clock::now() + stress_scaled(1500ms);
  while (checks <= 100 || std::chrono::steady_clock::now() < deadline) {
    std::int64_t lo = 0;
    for (unsigned t = 0; t < threads; ++t) {
      d1[t] = p[t].done.load(std::memory_order_seq_cst);
      lo += d1[t] * v;
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const std::int64_t r = c.read();
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // A thread may have been inside add() during read() only if it started an add
    // that had not finished before.
    std::int64_t in_progress = 0;
    for (unsigned t = 0; t < threads; ++t)
      if (p[t].started.load(std::memory_order_seq_cst) > d1[t]) ++in_progress;
    const std::int64_t slack = c.error_bound() + in_progress * (batch - 1 + v);
    ASSERT_GE(r, lo - slack) << "read() fell further behind than documented, " << in_progress
                             << " adds in progress";
    ++checks;
  }
  stop.store(true, std::memory_order_relaxed);
  for (auto& th : pool)
    th.join();
  std::int64_t total = 0;
  for (auto& x : p)
    total += x.done.load(std::memory_order_relaxed) * v;
  EXPECT_GT(checks, 100u);
  EXPECT_EQ(c.sum(), total);
  EXPECT_LE(detail::distance(c.read(), total), static_cast<std::uint64_t>(c.error_bound()));
}

// Fields stay apart, also when a slot spans two cache lines (N = 9: 144 bytes of
// words, stride 256), on both paths.
TEST(PercpuStats, FieldsStayApartInWideSlots) {
  percpu_stats<9> s;
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t) {
    pool.emplace_back([&, t] {
      set_rseq_fast_path(t % 2 == 0);
      for (int i = 0; i < 20000; ++i)
        for (std::size_t f = 0; f < 9; ++f)
          s.add(f, static_cast<std::int64_t>(f) - 4);
    });
  }
  for (auto& th : pool)
    th.join();
  const auto snap = s.snapshot();
  for (std::size_t f = 0; f < 9; ++f) {
    EXPECT_EQ(snap[f], 4 * 20000 * (static_cast<std::int64_t>(f) - 4)) << "field " << f;
    EXPECT_EQ(s.sum(f), snap[f]);
  }
  percpu_stats<1> one;
  one.inc(0);
  one.add(0, -3);
  EXPECT_EQ(one.sum(0), -2);
}

// read() stays within the bound at every moment of a concurrent run. Threads only
// add 1, publishing how many adds they completed, so the exact value at the time of
// a read lies in [lo, hi]: lo counted before it, hi after it plus one add per thread
// in progress. The documented bound for that moment is error_bound() plus
// batch - 1 + 1 for each thread inside add().
void read_within_bound(std::int64_t batch, paths path) {
  percpu_counter<> c;
  c.set_batch(batch);
  constexpr unsigned threads = 6;
  struct alignas(cache_line_size) progress {
    std::atomic<std::int64_t> n{0};
  };
  std::vector<progress> done(threads);
  std::atomic<bool> stop{false};
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      set_rseq_fast_path(path == paths::rseq || (path == paths::mixed && t % 2 == 0));
      std::int64_t i = 0;
      while (!stop.load(std::memory_order_relaxed) && i < 2'000'000) {
        c.inc();
        done[t].n.store(++i, std::memory_order_release);  // pairs with the acquire below
      }
    });
  }
  const std::int64_t slack = c.error_bound() + threads * batch;
  std::uint64_t checks = 0, far_checks = 0, above_checks = 0;
  // Run 700 ms and until both regimes below were checked (the threads may be slow to
  // get a cpu on a loaded machine); 60 s without them fails the test below.
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const auto ran = std::chrono::steady_clock::now() - start;
    if ((ran > 700ms && far_checks > 0 && above_checks > 0) || ran > 60s) break;
    std::int64_t lo = 0;
    for (auto& d : done)
      lo += d.n.load(std::memory_order_acquire);
    const std::int64_t r = c.read();
    const int below = c.compare(lo - slack - 1);
    // Above the exact value unless the threads add more than slack meanwhile;
    // checked against hi, taken after the call.
    const std::int64_t high_rhs = lo + 2 * slack + threads + 1;
    const int above = c.compare(high_rhs);
    std::int64_t hi = threads;
    for (auto& d : done)
      hi += d.n.load(std::memory_order_acquire);
    ASSERT_GE(r, lo - slack) << "read() fell further behind than documented";
    ASSERT_LE(r, hi) << "read() counted adds that never happened";
    ASSERT_EQ(below, 1);
    if (hi + slack < high_rhs) {
      ASSERT_EQ(above, -1);
      ++above_checks;
    }
    ++checks;
    if (lo > slack) ++far_checks;
  }
  stop.store(true, std::memory_order_relaxed);
  for (auto& th : pool)
    th.join();
  std::int64_t total = 0;
  for (auto& d : done)
    total += d.n.load(std::memory_order_relaxed);
  EXPECT_GT(checks, 100u);
  EXPECT_GT(far_checks, 0u);
  EXPECT_GT(above_checks, 0u);
  EXPECT_EQ(c.sum(), total);
  EXPECT_LE(detail::distance(c.read(), total), static_cast<std::uint64_t>(c.error_bound()));
  // Quiescent: compare() must agree with the exact value everywhere, including the
  // band where it has to fall back to sum().
  const std::int64_t eb = c.error_bound();
  for (std::int64_t rhs = total - eb - 3; rhs <= total + eb + 3; ++rhs)
    ASSERT_EQ(c.compare(rhs), sign(total - rhs)) << "rhs " << rhs;
  EXPECT_EQ(c.compare(total - 100 * eb - 1000), 1);
  EXPECT_EQ(c.compare(total + 100 * eb + 1000), -1);
}

TEST(PercpuCounter, ReadWithinBoundDefaultBatch) {
  read_within_bound(percpu_counter<>::default_batch(), paths::rseq);
}
TEST(PercpuCounter, ReadWithinBoundSmallBatchMixedPaths) {
  read_within_bound(4, paths::mixed);
}

// glibc's tunable glibc.pthread.rseq=0 leaves every thread without an rseq area:
// the counters must notice (cpu_id < 0 inside the sequence) and stay exact. Run in
// a child process, started with that environment.
TEST(PercpuCounter, WithoutRseqRegistrationFallsBack) {
  // Without rseq already (qemu-user implements none, nor can its child exec itself):
  // this process checks the portable path itself, and says so.
  const bool child = std::getenv("HOTPATH_TEST_NO_RSEQ_CHILD") != nullptr;
  const bool here = !child && !rseq_available();
  if (here) std::printf("rseq is not available in this process: checking the portable path here\n");
  if (child || here) {
    EXPECT_FALSE(rseq_available());
    EXPECT_FALSE(rseq_fast_path());
    exact_under_migration({6, paths::rseq, 8, stress_iters / 4, 500ms});
    return;
  }
  std::vector<std::string> env_store;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::string(*e).rfind("GLIBC_TUNABLES=", 0) != 0) env_store.emplace_back(*e);
  env_store.emplace_back("GLIBC_TUNABLES=glibc.pthread.rseq=0");
  env_store.emplace_back("HOTPATH_TEST_NO_RSEQ_CHILD=1");
  std::vector<char*> envp;
  for (auto& s : env_store)
    envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe";
  std::string filter = "--gtest_filter=PercpuCounter.WithoutRseqRegistrationFallsBack";
  char* argv[] = {self.data(), filter.data(), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child without rseq failed";
}

}  // namespace
}  // namespace hotpath::test
