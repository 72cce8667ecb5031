// SPDX-License-Identifier: MIT
// A deterministic scheduler for schedule exploration (tests/schedule/), in the spirit
// of folly's DeterministicSchedule, with a weak-memory model and a race detector.
//
// A property is a function run once per seed. It builds a primitive whose Policy is
// sched::policy<> and calls sched::run() with a few thread bodies. run() runs each
// body as a fiber (ucontext) on the calling thread, one at a time: every operation
// on a sched::atomic, every fence, park, wake-up and spin step is a scheduling point
// at which the scheduler, drawing from a generator seeded by the seed, picks the
// thread that runs next. The same seed gives the same schedule, so a failure is
// reported with its seed and rerun by number (HOTPATH_SCHEDULE_SEED=N). Fibers make a
// hand-off a user-space context switch, so the exploration does not slow down on a
// loaded machine; the primitives' thread_locals go through the policy's local<T>(),
// one per fiber. Sanitizer builds (HOTPATH_SCHEDULE_THREADS) use one real thread per
// body instead, handing a baton, since the sanitizers do not follow ucontext.
//
// What is modelled:
// - Interleavings: any thread at any scheduling point; per seed, how often the
//   scheduler preempts (from every point to rarely), so both fine interleavings and
//   long runs of one thread are explored.
// - A store buffer per thread: a store, relaxed, release or seq_cst, whole or of
//   some bits (store_bits: a byte store into a word), goes into the storing thread's
//   buffer; the thread's own loads see it at once, other threads only once it drains
//   to memory. The scheduler drains a store of a random buffer at random points; a
//   seq_cst store, a seq_cst fence, park and wake-up (system calls) drain the
//   caller's whole buffer. So a missing store-load fence (Dekker, sleeper/waker)
//   fails here on any hardware. Two memory models, chosen per seed (or for every
//   seed by HOTPATH_SCHEDULE_STORES=tso|weak):
//   - TSO, as x86: the buffer is FIFO, and an RMW of any order drains it.
//   - Weak, as the C++ model and arm64 allow: a store may land before older ones
//     unless one of them is to the same word (coherence), or a release fence lies
//     between them, or it is itself a release store (which lands only once every
//     older one has). So a relaxed store passes earlier relaxed and release stores
//     (roach motel: later accesses move up past a release, earlier ones never down),
//     and a publication made relaxed can be seen before what it publishes. An RMW
//     drains the buffer only if it is a release; an acquire or relaxed one drains
//     the stores before its thread's last release fence and the stores to its own
//     word (and those older), and its own write lands at once, before stores still
//     buffered: so a handoff store into a word can be overwritten by the receiver's
//     own earlier initialisation of that word, which had not landed yet.
//   tests/schedule/model.cpp checks what each model admits and forbids (litmus).
// - The asymmetric fence pair (detail/membarrier.hpp), chosen per seed: with
//   membarrier, light_fence() is a compiler barrier (nothing here) and heavy_fence()
//   flushes every thread's buffer; without it, both are seq_cst fences.
// - Happens-before, with vector clocks: acquire/release/seq_cst loads, stores, RMWs
//   and fences, release sequences continued by RMWs (C++20), thread start and join.
//   sched::data<T> is plain memory checked against it (FastTrack): two accesses to one
//   data<T>, one a write, not ordered by happens-before are a data race and a failure,
//   even when the values happen to come out right. A relaxed acquire or release in a
//   lock is caught this way: the next owner's access to the data it guards races.
//   Reading a data<T> after its destructor ran (an object freed while a reader holds
//   it) is a failure too, and so is any access to a sched::atomic after its
//   destructor ran (a lock freed by its next owner while an unlock() still reads it;
//   wake-ups on its address stay allowed, as for a futex).
// - Parking as a futex: park(word, expected, channel) sleeps only if memory (not the
//   caller's buffer) still holds `expected`, so a waker that runs before the sleeper
//   sleeps is explored; unpark_one/channel/all wake sleepers of the word (and channel).
//   A run in which every unfinished thread sleeps is a deadlock: a lost wake-up.
//   Spurious wake-ups are injected on some seeds.
// - Spinning: a wait strategy's relax() is a scheduling point that may also decide to
//   park (per seed: rarely to always). A spinning thread is not picked again until
//   memory changes; if every thread spins and nothing can change, that is a livelock.
// - Migration: policy::current_cpu() returns a random cpu of two at every call.
//
// What is not modelled: load buffering (a load reordered after a later store),
// loads reordered with each other, IRIW / non-multi-copy-atomic stores,
// out-of-thin-air values, a relaxed load reading an older value than memory holds
// (beyond the buffers above), compiler reordering, and std::mutex (the primitives'
// own mutexes are real: no body may block on one while another thread holds it). So
// an acquire made relaxed changes no value here, only happens-before, and is caught
// through sched::data<T>; a release made relaxed, through both.
//
// Determinism needs every shared access of the bodies to go through sched::atomic,
// sched::data or plain variables touched only in the scheduled threads. Bodies must
// not block outside the scheduler (on a std::mutex that another body holds): with
// fibers that blocks the process; with threads a watchdog reports it with its seed.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

namespace hotpath::test::sched {

// ---- the model's operations (schedule.cpp, schedule_memory.cpp) -----------

// A modelled memory word: what other threads see, and the happens-before clock of
// the release sequence that wrote it.
class location {
 public:
  explicit location(std::uint64_t v) noexcept;
  ~location();
  location(const location&) = delete;
  location& operator=(const location&) = delete;

  std::uint64_t load(std::memory_order o) const noexcept;
  void store(std::uint64_t v, std::memory_order o) noexcept;
  // A store of the bits in `mask` only (a byte store to a word: x86's mixed-size
  // access); buffered like any store, the other bits untouched when it drains.
  void store_bits(std::uint64_t mask, std::uint64_t v, std::memory_order o) noexcept;
  // Read-modify-write: f(old, new&) returns false to leave the word unchanged (a
  // failed CAS); a weak one may also fail spuriously. Returns the old value; `done`
  // says whether the word was written.
  using rmw_fn = bool (*)(const void* ctx, std::uint64_t old, std::uint64_t& next);
  std::uint64_t rmw(std::memory_order success, std::memory_order failure, rmw_fn f, const void* ctx,
                    bool weak, bool& done) noexcept;

  std::uint64_t memory_ = 0;  // what other threads' loads see
  std::uint64_t gen_ = 0;     // run that wrote sync_
  std::array<std::uint32_t, 8> sync_{};
  bool destroyed_ = false;  // its destructor ran (the memory kept by the graveyard)

 private:
  void check_alive(const char* what) const noexcept;
};

// Shadow state of a sched::data<T>.
struct shadow {
  std::uint64_t write_gen = 0;
  std::uint32_t write_tid = 0;
  std::uint32_t write_clock = 0;
  std::uint64_t reads_gen = 0;
  std::array<std::uint32_t, 8> reads{};
  bool destroyed = false;
};
void note_read(shadow& s) noexcept;
void note_write(shadow& s) noexcept;
void note_destroy(shadow& s) noexcept;

void yield_point() noexcept;               // a bare scheduling point
void fence(std::memory_order o) noexcept;  // atomic_thread_fence
void light_fence() noexcept;               // detail::light_fence()
void heavy_fence() noexcept;               // detail::heavy_fence()
bool spin() noexcept;                      // one relax(); false: park now
void park(location& w, std::uint32_t expected, unsigned channel) noexcept;
void unpark(location& w, unsigned channel, int count, bool all_channels) noexcept;
unsigned choose(unsigned n) noexcept;  // a scheduler decision in [0, n)
unsigned thread_id() noexcept;         // 0 outside run(), else 1..n
[[noreturn]] void fail(const std::string& why) noexcept;
inline void check(bool ok, const char* what) noexcept {
  if (!ok) fail(std::string("check failed: ") + what);
}

// Runs the bodies as scheduled threads (ids 1..n) until all finish; a failure in
// any of them ends the process with a report.
void run(std::vector<std::function<void()>> bodies);
inline void run(unsigned n, const std::function<void(unsigned)>& body) {
  std::vector<std::function<void()>> v;
  for (unsigned i = 0; i < n; ++i)
    v.emplace_back([&body, i] { body(i + 1); });
  run(std::move(v));
}

// Runs f, which may call run(), on decisions of its own rather than the seed's: for
// setup that a property does once per process (e.g. registering reader slots in a
// domain that outlives the seed), so that seed N runs the same alone or after others.
void setup(const std::function<void()>& f);

// The calling scheduled thread's own T (value-initialised on first use, destroyed
// when the thread ends, newest first, still under the scheduler): what a policy's
// local<T>() gives the primitives instead of thread_local (detail/policy.hpp), so
// that fibers and reused threads each have their own.
void* local_get(const void* key) noexcept;
void local_put(const void* key, void* p, void (*destroy)(void*));
template <class T>
T& local() {
  static const char key = 0;
  if (void* p = local_get(&key)) return *static_cast<T*>(p);
  T* p = new T();
  local_put(&key, p, [](void* q) { delete static_cast<T*>(q); });
  return *p;
}

// Memory for objects that a property retires: freed only when the seed ends, so a
// late reader finds the destroyed shadow of a data<T> rather than reused memory.
void* graveyard_new(std::size_t n);
void graveyard_delete(void* p) noexcept;
struct graveyard_object {
  static void* operator new(std::size_t n) { return graveyard_new(n); }
  static void operator delete(void* p) noexcept { graveyard_delete(p); }
};

// ---- what a property uses ---------------------------------------------------

// std::atomic<T>'s interface, each operation a scheduling point through the model.
template <class T>
class atomic : location {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8);
  static std::uint64_t enc(T v) noexcept {
    std::uint64_t r = 0;
    std::memcpy(&r, &v, sizeof v);
    return r;
  }
  static T dec(std::uint64_t r) noexcept {
    T v;
    std::memcpy(&v, &r, sizeof v);
    return v;
  }
  static constexpr std::memory_order failure_of(std::memory_order o) noexcept {
    return o == std::memory_order_acq_rel   ? std::memory_order_acquire
           : o == std::memory_order_release ? std::memory_order_relaxed
                                            : o;
  }
  template <class F>
  T apply(F f, std::memory_order o) noexcept {
    bool done = false;
    return dec(rmw(
        o, o,
        [](const void* ctx, std::uint64_t old, std::uint64_t& next) {
          next = enc((*static_cast<const F*>(ctx))(dec(old)));
          return true;
        },
        &f, false, done));
  }
  bool cas(T& expected, T desired, std::memory_order s, std::memory_order f, bool weak) noexcept {
    struct args {
      T expected, desired;
    } a{expected, desired};
    bool done = false;
    const T old = dec(rmw(
        s, f,
        [](const void* ctx, std::uint64_t o, std::uint64_t& next) {
          const auto* p = static_cast<const args*>(ctx);
          if (dec(o) != p->expected) return false;
          next = enc(p->desired);
          return true;
        },
        &a, weak, done));
    if (done) return true;
    expected = old;  // a weak CAS may also fail spuriously, with expected unchanged
    return false;
  }

 public:
  atomic() noexcept : location(0) {}
  atomic(T v) noexcept : location(enc(v)) {}  // NOLINT(google-explicit-constructor)

  T load(std::memory_order o = std::memory_order_seq_cst) const noexcept {
    return dec(location::load(o));
  }
  void store(T v, std::memory_order o = std::memory_order_seq_cst) noexcept {
    location::store(enc(v), o);
  }
  // Stores the bits of `mask` only (queued_lock's byte store to its word).
  void store_bits(T mask, T v, std::memory_order o) noexcept requires std::is_integral_v<T> {
    location::store_bits(enc(mask), enc(v), o);
  }
  T exchange(T v, std::memory_order o = std::memory_order_seq_cst) noexcept {
    return apply([v](T) { return v; }, o);
  }
  bool compare_exchange_strong(T& e, T d, std::memory_order s, std::memory_order f) noexcept {
    return cas(e, d, s, f, false);
  }
  bool compare_exchange_strong(T& e, T d,
                               std::memory_order o = std::memory_order_seq_cst) noexcept {
    return cas(e, d, o, failure_of(o), false);
  }
  bool compare_exchange_weak(T& e, T d, std::memory_order s, std::memory_order f) noexcept {
    return cas(e, d, s, f, true);
  }
  bool compare_exchange_weak(T& e, T d, std::memory_order o = std::memory_order_seq_cst) noexcept {
    return cas(e, d, o, failure_of(o), true);
  }
  T fetch_add(T v, std::memory_order o =
                       std::memory_order_seq_cst) noexcept requires std::is_integral_v<T> {
    return apply([v](T x) { return static_cast<T>(x + v); }, o);
  }
  T fetch_sub(T v, std::memory_order o =
                       std::memory_order_seq_cst) noexcept requires std::is_integral_v<T> {
    return apply([v](T x) { return static_cast<T>(x - v); }, o);
  }
  T fetch_or(T v, std::memory_order o =
                      std::memory_order_seq_cst) noexcept requires std::is_integral_v<T> {
    return apply([v](T x) { return static_cast<T>(x | v); }, o);
  }
  T fetch_and(T v, std::memory_order o =
                       std::memory_order_seq_cst) noexcept requires std::is_integral_v<T> {
    return apply([v](T x) { return static_cast<T>(x & v); }, o);
  }

  location& model() noexcept { return *this; }
};

// Plain memory checked for data races and use after destruction.
template <class T>
class data {
 public:
  // Construction is a write: a reader that finds the object without a happens-before
  // edge to its construction (an unpublished pointer) races with it.
  data() noexcept { note_write(s_); }
  explicit data(T v) noexcept : v_(v) { note_write(s_); }
  ~data() { note_destroy(s_); }
  data(const data&) = delete;
  data& operator=(const data&) = delete;

  T read() const noexcept {
    note_read(s_);
    return v_;
  }
  void write(T v) noexcept {
    note_write(s_);
    v_ = v;
  }

 private:
  T v_{};
  mutable shadow s_;
};

// Deliberate bugs a policy can introduce (mutants that need no change to a header).
struct mutations {
  bool skip_wake = false;       // unpark_*() do nothing
  bool no_light_fence = false;  // light_fence() does nothing, even without membarrier
  bool no_heavy_fence = false;  // heavy_fence() does nothing
};

// Wait strategies: every relax() is a scheduling point. yield() (after a relax()
// that said "park" where parking is impossible) adds nothing: relax() already let the
// others run, and a real sched_yield() would only wait for the kernel.
struct wait {  // may park (the scheduler decides when)
  static constexpr bool parks = true;
  static bool relax(unsigned& n) noexcept {
    ++n;
    return spin();
  }
  static void yield() noexcept {}
};
struct spin_wait {  // never parks
  static constexpr bool parks = false;
  static bool relax(unsigned& n) noexcept {
    ++n;
    (void)spin();
    return true;
  }
  static void yield() noexcept {}
};

// The policy that puts a primitive under the scheduler (see detail/policy.hpp).
template <class Wait = wait, mutations M = mutations{}>
struct policy {
  using wait = Wait;
  template <class T>
  using atomic = sched::atomic<T>;

  template <class A>
  static void park(A& w, std::uint32_t expected, unsigned channel) noexcept {
    sched::park(w.model(), expected, channel);
  }
  template <class A>
  static void unpark_one(A& w, unsigned channel) noexcept {
    if constexpr (!M.skip_wake) sched::unpark(w.model(), channel, 1, false);
  }
  template <class A>
  static void unpark_channel(A& w, unsigned channel) noexcept {
    if constexpr (!M.skip_wake) sched::unpark(w.model(), channel, -1, false);
  }
  template <class A>
  static void unpark_all(A& w) noexcept {
    if constexpr (!M.skip_wake) sched::unpark(w.model(), 0, -1, true);
  }
  static void light_fence() noexcept {
    if constexpr (M.no_light_fence) {
      yield_point();
    } else {
      sched::light_fence();
    }
  }
  static void heavy_fence() noexcept {
    if constexpr (M.no_heavy_fence) {
      yield_point();
    } else {
      sched::heavy_fence();
    }
  }
  static unsigned current_cpu() noexcept { return choose(2); }
  // bucket_table's eviction sampling: which buckets it probes is a scheduler decision.
  static std::uint64_t random() noexcept { return choose(1u << 31); }
  // RCU: the fibers are the only threads (no reclaimer thread), and batch ages stand
  // still (a batch closes by size or at rcu_barrier()), so that seeds replay alike.
  static constexpr bool reclaimer_thread = false;
  static std::uint64_t now_ns() noexcept { return 0; }
  // queued_lock's thread slot: the scheduled thread's id (0 outside run()).
  static std::uint32_t thread_slot() noexcept { return thread_id(); }
  template <class T>
  static T& local() noexcept {
    return sched::local<T>();
  }
};

// ---- properties and the runner ---------------------------------------------

struct options {
  unsigned seeds = 100000;  // default budget; --seeds or HOTPATH_SCHEDULE_SEEDS overrides
  int park = -1;            // -1: per seed; else percent chance that relax() parks
};

struct property {
  const char* name;
  options opts;
  void (*body)();
};
bool add_property(const property& p);

// Runs the properties selected on the command line; see schedule_runner.cpp's usage().
int main(int argc, char** argv);

}  // namespace hotpath::test::sched

#define HOTPATH_SCHEDULE_CAT2(a, b) a##b
#define HOTPATH_SCHEDULE_CAT(a, b) HOTPATH_SCHEDULE_CAT2(a, b)
// HOTPATH_PROPERTY(name, options{...}) { body run once per seed }
#define HOTPATH_PROPERTY(name, ...)                                            \
  static void HOTPATH_SCHEDULE_CAT(property_, name)();                         \
  [[maybe_unused]] static const bool HOTPATH_SCHEDULE_CAT(registered_, name) = \
      ::hotpath::test::sched::add_property(                                    \
          {#name, __VA_ARGS__, &HOTPATH_SCHEDULE_CAT(property_, name)});       \
  static void HOTPATH_SCHEDULE_CAT(property_, name)()
