// SPDX-License-Identifier: MIT
// The deterministic scheduler's property runner (schedule.hpp): the registry, the
// seeds and their parameters, failure reports, and main().
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "schedule_world.hpp"

namespace hotpath::test::sched {

using namespace model;

[[noreturn]] void fail(const std::string& why) noexcept {
  world& w = the();
  const params& p = w.p;
  std::fprintf(stderr,
               "[schedule] %s: seed %" PRIu64 " FAILED at step %" PRIu64
               " (preempt %u%%, drain %u%%, park %u%%, spurious %u%%, weak-CAS fail %u%%, "
               "fences: %s, stores: %s)\n  %s\n%s",
               w.property, w.seed, w.steps, p.preempt, p.flush, p.park, p.spurious, p.weak_fail,
               p.membarrier ? "membarrier" : "seq_cst fences", p.weak ? "weak" : "TSO", why.c_str(),
               w.active ? describe_threads().c_str() : "");
  std::fprintf(stderr,
               "  rerun: HOTPATH_SCHEDULE_SEED=%" PRIu64
               " %s --property %s   (add HOTPATH_SCHEDULE_TRACE=1 to print every step)\n",
               w.seed, w.argv0, w.property);
  if (w.expect_caught) {
    std::fprintf(stderr, "[schedule] mutant caught by %s at seed %" PRIu64 " (%u of %u)\n",
                 w.property, w.seed, w.seed_index + 1, w.seed_budget);
  }
  std::fflush(stderr);
  std::fflush(stdout);
  std::_Exit(w.expect_caught ? 0 : 1);
}

// ---- properties ------------------------------------------------------------------

namespace {
std::vector<property>& registry() {
  static std::vector<property> r;
  return r;
}

void begin_seed(std::uint64_t seed, const options& o) {
  world& w = the();
  w.seed = seed;
  w.r = rng{seed * 0x2545f4914f6cdd1dull + 1};
  params& p = w.p;
  static constexpr unsigned preempt[] = {100, 50, 20, 5};
  static constexpr unsigned flush[] = {50, 20, 5, 1};
  static constexpr unsigned park[] = {10, 50, 100};
  p.preempt = preempt[w.r.below(4)];
  p.flush = flush[w.r.below(4)];
  p.park = o.park >= 0 ? static_cast<unsigned>(o.park) : park[w.r.below(3)];
  p.spurious = w.r.below(3) == 0 ? 1 : 0;
  p.weak_fail = w.r.below(2) == 0 ? 10 : 0;
  p.membarrier = w.r.below(2) == 0;
  p.weak = w.r.below(2) == 0;
  if (w.stores >= 0) p.weak = w.stores != 0;
}

void end_seed() {
  world& w = the();
  for (void* p : w.graveyard)
    ::operator delete(p);
  w.graveyard.clear();
}

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* s = std::getenv(name);
  return s != nullptr && *s != '\0' ? std::strtoull(s, nullptr, 10) : fallback;
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--list] [--property NAME] [--seeds N] [--expect-caught] [--hashes]\n"
               "  HOTPATH_SCHEDULE_SEED=N    run seed N only (as a failure report prints it)\n"
               "  HOTPATH_SCHEDULE_SEEDS=N   seeds per property (default: the property's)\n"
               "  HOTPATH_SCHEDULE_TRACE=1   print every step of every run\n"
               "  HOTPATH_SCHEDULE_STORES=tso|weak  every seed in that memory model (default:\n"
               "                             chosen per seed)\n"
               "  --expect-caught            a mutant build: succeed iff a property fails\n"
               "  --hashes                   print a hash of each run's schedule\n",
               argv0);
  return 2;
}
}  // namespace

bool add_property(const property& p) {
  registry().push_back(p);
  return true;
}

int main(int argc, char** argv) {
  world& w = the();
  w.argv0 = argv[0];
  std::string only;
  std::uint64_t seeds = env_number("HOTPATH_SCHEDULE_SEEDS", 0);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--property" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--seeds" && i + 1 < argc) {
      seeds = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--hashes") {
      w.print_hashes = true;
    } else if (a == "--expect-caught") {
      w.expect_caught = true;
    } else if (a == "--list") {
      for (const property& p : registry())
        std::printf("%s\n", p.name);
      return 0;
    } else {
      return usage(argv[0]);
    }
  }
  w.trace = env_number("HOTPATH_SCHEDULE_TRACE", 0) != 0;
  if (const char* m = std::getenv("HOTPATH_SCHEDULE_STORES"); m != nullptr && *m != '\0') {
    if (std::strcmp(m, "tso") != 0 && std::strcmp(m, "weak") != 0) return usage(argv[0]);
    w.stores = std::strcmp(m, "weak") == 0 ? 1 : 0;
  }
  const std::uint64_t single = env_number("HOTPATH_SCHEDULE_SEED", 0);
  bool any = false;
  for (const property& p : registry()) {
    if (!only.empty() && only != p.name) continue;
    any = true;
    w.property = p.name;
    const std::uint64_t budget = seeds != 0 ? seeds : p.opts.seeds;
    const auto t0 = std::chrono::steady_clock::now();
    const std::uint64_t first = single != 0 ? single : 1;
    const std::uint64_t count = single != 0 ? 1 : budget;
    w.total_steps = 0;
    w.seed_budget = static_cast<unsigned>(count);
    for (std::uint64_t i = 0; i < count; ++i) {
      w.seed_index = static_cast<unsigned>(i);
      begin_seed(first + i, p.opts);
      p.body();
      end_seed();
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[schedule] %s: %" PRIu64 " seeds passed (%" PRIu64 " steps, %.1f s)\n", p.name,
                count, w.total_steps, s);
  }
  if (!any) {
    std::fprintf(stderr, "no property named '%s' (--list shows them)\n", only.c_str());
    return 2;
  }
  if (w.expect_caught) {
    std::fprintf(stderr, "[schedule] mutant SURVIVED: no property failed within its seeds\n");
    return 1;
  }
  return 0;
}

}  // namespace hotpath::test::sched

int main(int argc, char** argv) {
  return hotpath::test::sched::main(argc, argv);
}