// SPDX-License-Identifier: MIT
// The deterministic scheduler's state, shared by its parts: schedule.cpp (threads,
// scheduling points, the run), schedule_memory.cpp (store buffers, locations, fences,
// data races) and schedule_runner.cpp (properties, seeds, main). Not for tests: they
// use schedule.hpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <semaphore>
#include <thread>
#include <unordered_map>
#include <vector>

#include "schedule.hpp"

// Fibers on the calling thread by default: a hand-off is a context switch in user
// space (a few instructions on x86-64, ucontext elsewhere), so the exploration costs
// the same CPU time on a loaded machine as on a quiet one.
// Sanitizers do not follow ucontext switches unannotated, so their builds define
// HOTPATH_SCHEDULE_THREADS: one real thread per scheduled thread, handing a baton
// (semaphores), each hand-off then waiting for the kernel to run the next thread.
#if defined(HOTPATH_SCHEDULE_THREADS)
#define HOTPATH_SCHEDULE_FIBERS 0
#else
#define HOTPATH_SCHEDULE_FIBERS 1
#include <ucontext.h>
#endif

namespace hotpath::test::sched::model {

constexpr unsigned max_threads = 8;  // clocks hold the main thread (0) and up to 7 more
constexpr std::uint64_t max_steps = 200000;
constexpr std::uint64_t max_idle = 2000;
using vclock = std::array<std::uint32_t, max_threads>;

inline void join(vclock& a, const vclock& b) noexcept {
  for (unsigned i = 0; i < max_threads; ++i)
    a[i] = a[i] < b[i] ? b[i] : a[i];
}
inline bool is_acquire(std::memory_order o) noexcept {
  return o == std::memory_order_acquire || o == std::memory_order_consume ||
         o == std::memory_order_acq_rel || o == std::memory_order_seq_cst;
}
inline bool is_release(std::memory_order o) noexcept {
  return o == std::memory_order_release || o == std::memory_order_acq_rel ||
         o == std::memory_order_seq_cst;
}
inline const char* order_name(std::memory_order o) noexcept {
  switch (o) {
    case std::memory_order_relaxed:
      return "relaxed";
    case std::memory_order_consume:
      return "consume";
    case std::memory_order_acquire:
      return "acquire";
    case std::memory_order_release:
      return "release";
    case std::memory_order_acq_rel:
      return "acq_rel";
    default:
      return "seq_cst";
  }
}

// splitmix64: small, fast, and the same on every platform.
struct rng {
  std::uint64_t s = 0;
  std::uint64_t next() noexcept {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  unsigned below(unsigned n) noexcept { return static_cast<unsigned>(next() % n); }
  bool percent(unsigned p) noexcept { return below(100) < p; }
};

struct pending {
  location* loc;
  std::uint64_t value;
  vclock sync;
  std::uint64_t mask = ~std::uint64_t{0};  // the bits the store writes (a byte store: 0xff)
  bool release = false;  // a release (or seq_cst) store: lands only after every earlier one
  unsigned epoch = 0;    // the thread's release fences before it: lands after every earlier one
};

enum class status { runnable, blocked, finished };

#if HOTPATH_SCHEDULE_FIBERS
#if defined(__x86_64__) && defined(__linux__)
struct fiber_context {
  void* sp = nullptr;
};
#else
struct fiber_context {
  ucontext_t uc{};
};
#endif
#endif

struct local_slot {
  const void* key;
  void* p;
  void (*destroy)(void*);
};

struct thread_state {
  unsigned id = 0;
  vclock vc{};           // happens-before clock
  vclock fence_rel{};    // vc at the last release fence: what a relaxed store carries
  vclock acq_pending{};  // clocks read by relaxed loads: an acquire fence takes them
  std::deque<pending> buffer;
  unsigned fence_epoch = 0;  // release fences so far (pending::epoch)
  status st = status::runnable;
  bool spinning = false;
  const location* park_loc = nullptr;
  unsigned park_channel = 0;
  std::vector<local_slot> locals;  // the thread's local<T>()s, in creation order
  std::function<void()> body;
#if HOTPATH_SCHEDULE_FIBERS
  fiber_context ctx;
#else
  std::binary_semaphore go{0};
  std::thread th;
#endif
};

struct params {
  unsigned preempt = 100;  // % of scheduling points at which another thread may run
  unsigned flush = 20;     // % of points at which a random buffered store drains
  unsigned park = 50;      // % of relax() calls that park
  unsigned spurious = 0;   // % of points that wake a sleeper spuriously
  unsigned weak_fail = 0;  // % of weak CASes that fail spuriously
  bool membarrier = true;  // the fence pair's implementation
  bool weak = false;       // stores land out of order where C++ allows it (flush_one())
};

struct world {
  bool active = false;
  std::uint64_t gen = 1;
  std::uint64_t seed = 0;
  rng r;
  params p;
  std::vector<std::unique_ptr<thread_state>> threads;
  thread_state main_state;
  thread_state* current = nullptr;
#if HOTPATH_SCHEDULE_FIBERS
  fiber_context main_ctx;
  std::unique_ptr<char[]> stacks[max_threads];  // reused by every run
#else
  std::binary_semaphore done{0};
#endif
  std::uint64_t steps = 0;
  std::uint64_t idle = 0;
  std::uint64_t total_steps = 0;
  std::uint64_t hash = 0;  // of the schedule: who ran at each point, which buffer drained
  bool trace = false;
  bool print_hashes = false;
  std::unordered_map<const void*, unsigned> names;
  std::vector<void*> graveyard;
  const char* property = "";
  const char* argv0 = "";
  bool expect_caught = false;
  unsigned seed_index = 0;
  unsigned seed_budget = 0;
  int stores = -1;  // HOTPATH_SCHEDULE_STORES: -1 per seed, 0 TSO, 1 weak
};

inline world& the() {
  static world* const w = new world;  // never destroyed: threads may outlive main
  return *w;
}
extern thread_local thread_state* tls_self;  // null outside run()'s threads
inline thread_state& self() noexcept {
  return tls_self != nullptr ? *tls_self : the().main_state;
}
inline bool scheduled(const thread_state& t) noexcept {
  return &t != &the().main_state;
}

// schedule.cpp
unsigned name_of(const void* p);
void trace(const thread_state& me, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void changed() noexcept;
void mix(std::uint64_t v) noexcept;
void point(thread_state& me);
thread_state* pick(thread_state& me);
void switch_to(thread_state& me, thread_state* next);
void finish(thread_state& me);
std::string describe_threads();

// schedule_memory.cpp
const vclock& sync_of(const location& l) noexcept;
void write_memory(location& l, std::uint64_t v, const vclock& s) noexcept;
void land(thread_state& t, std::size_t i) noexcept;
void flush_one(thread_state& t) noexcept;
void flush_all(thread_state& t) noexcept;
void flush_to(thread_state& t, const location& l) noexcept;
bool flush_random() noexcept;

}  // namespace hotpath::test::sched::model
