// SPDX-License-Identifier: MIT
// RCU (read-copy-update) with the names of P2545, C++26 <rcu>: rcu_domain,
// rcu_default_domain(), rcu_synchronize, rcu_retire, rcu_obj_base<T, D>, rcu_barrier.
// Code written against hotpath should move to std:: by changing a namespace.
//
// The read side is liburcu's memb flavour: a reader copies the domain's grace-period
// sequence into its own word, on its own cache line, with a compiler barrier; the
// writer's heavy_fence() (membarrier) makes that store visible. Each reader word:
//
//   ctr == 0                 outside any read-side section (or the slot is free)
//   ctr == s > 0             inside a section that began when gp_seq_ was s
//
// A grace period: heavy_fence(); t = ++gp_seq_; then wait until every reader word
// is 0 or >= t. A reader with ctr >= t loaded gp_seq_ after the fence, so it sees
// every removal made before the grace period began; gp_seq_ is 64 bits and never
// wraps, so one pass suffices (liburcu flips a phase bit twice instead). Readers
// that keep re-entering do not starve the writer: their word moves to >= t.
//
// Threads get a reader slot on their first lock() and give it back when they exit
// (a thread_local hook); slots live in a grow-only list and are reused, so
// registering never blocks and a writer never waits for an exited thread. A section
// opened after the hook ran (another thread_local's destructor reading under RCU)
// takes a slot and gives it back at its outermost unlock(). lock() is noexcept and
// never waits. Where no slot is free and none can be allocated (out of memory), the
// section takes one of four reserve slots built into the domain, for that section
// only; with all four in sections, it is counted in a word that writers wait to read
// 0 (so sections that keep overlapping there hold writers off: only while memory is
// exhausted). What glibc allocates for thread_locals can still abort (docs/rcu.md).
//
// fork() is handled as liburcu does (detail/fork.hpp): in the child, readers of
// threads that did not survive the fork no longer hold up grace periods, and the
// reclaimer thread, which did not survive either, is started again by the child's
// first retire (what was pending at the fork waits for it, or for rcu_barrier()).
//
// Read-side sections must not be entered from a signal handler: lock() counts the
// nesting before it stores the sequence, so a handler that interrupts it between
// the two would find itself "nested" in a section that does not hold writers yet.
//
// Retire pushes onto a lock-free list and closes batches, each reclaimed once every
// reader has passed its grace period. A batch closes by size (batch_size retires:
// the retiring thread starts the grace period, at its outermost unlock() if it is in
// a section) or by age: the domain's reclaimer thread, started by the first retire,
// sleeps until something is pending and closes the batch max_batch_age after its
// first retire. The bound: an object is reclaimed within max_batch_age, plus the
// read-side sections that hold its grace period and the one before it (one batch is
// in flight at a time), plus the reclaimer's wake-up and its polling (naps of 10 us
// doubling up to 1 ms). The reclaimer never opens a section, so no deleter runs
// inside a caller's; set_reclaimer_thread(false) stops it, and then a batch closes by
// age only at a later retire.
//
// Memory: each retire counts its bytes (sizeof(T), or the caller's hint). One that
// would take the backlog past backlog_limit() starts a grace period at once and,
// outside a read-side section, waits for at most one grace period before returning
// (as the kernel's kvfree_rcu_mightsleep() does): do not retire so while holding a
// lock that readers take inside their sections. Inside a section, in a deleter, in
// rcu_cell::update()'s f, or once exit has begun, it cannot wait, and the backlog
// goes over the limit. rcu_synchronize, rcu_barrier and such a retire are the only
// calls that block; calling the first two inside a read-side section is a
// precondition violation (it would wait for itself), asserted in debug builds.
//
// Exit: the reclaimer registers an atexit handler when it starts; once exit() has
// run it, no deleter runs in the reclaimer or in a retire's poll (rcu_barrier still
// reclaims), and no retire waits. What is still pending stays reachable from the
// domain: not a leak.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <utility>

#include "hotpath/detail/background_thread.hpp"
#include "hotpath/detail/config.hpp"
#include "hotpath/detail/fork.hpp"
#include "hotpath/detail/futex.hpp"
#include "hotpath/detail/membarrier.hpp"
#include "hotpath/detail/policy.hpp"

HOTPATH_VISIBILITY_BEGIN
namespace hotpath {

namespace detail {
// An entry in a domain's retire list: rcu_obj_base derives from it, rcu_retire
// allocates one around the pointer.
struct rcu_node {
  rcu_node* rcu_next = nullptr;
  void (*rcu_reclaim)(rcu_node*) noexcept = nullptr;
  std::size_t rcu_bytes = 0;  // counted against the domain's backlog limit
};

// The clock of batch ages: the policy's now_ns() if it has one (the deterministic
// scheduler's stands still, so that a seed replays alike), else steady_clock.
template <class Policy>
inline std::uint64_t policy_now_ns() noexcept {
  if constexpr (requires { Policy::now_ns(); }) {
    return Policy::now_ns();
  } else {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
  }
}

// May the domain start its reclaimer thread? Not where the policy says no (the
// deterministic scheduler runs a test's threads as fibers, and nothing else).
template <class Policy>
inline constexpr bool policy_reclaimer_thread = [] {
  if constexpr (requires { Policy::reclaimer_thread; }) {
    return static_cast<bool>(Policy::reclaimer_thread);
  } else {
    return true;
  }
}();
}  // namespace detail

// A domain: the set of readers a grace period waits for. As in P2545 there are no
// public constructors; basic_rcu_domain<Policy>::instance() is the one domain per
// policy (the policy's wait strategy is how a grace period waits for readers).
template <class T, class Policy>
class basic_rcu_cell;

template <class Policy = default_policy>
class basic_rcu_domain {
  template <class, class>
  friend class basic_rcu_cell;  // charges a value's bytes before it unpublishes it

  using wait = typename Policy::wait;
  template <class T>
  using atomic = typename Policy::template atomic<T>;

 public:
  // A batch of retired objects closes, and its grace period starts, when it holds
  // batch_size objects or when its first is max_batch_age old, whichever comes first.
  static constexpr std::size_t batch_size = 64;
  static constexpr std::chrono::microseconds max_batch_age{1000};
  // Retired bytes not yet reclaimed, before a retire waits (set_backlog_limit()).
  static constexpr std::size_t default_backlog_limit = std::size_t{64} << 20;

  // Never destroyed: threads and retired objects may outlive static destruction.
  // Built in static storage: a first use out of memory does not terminate.
  static basic_rcu_domain& instance() noexcept {
    alignas(basic_rcu_domain) static unsigned char storage[sizeof(basic_rcu_domain)];
    static basic_rcu_domain* const d = new (storage) basic_rcu_domain;
    return *d;
  }

  basic_rcu_domain(const basic_rcu_domain&) = delete;
  basic_rcu_domain& operator=(const basic_rcu_domain&) = delete;

  // Lockable: read-side sections. They nest; only the outermost touches shared state.
  void lock() noexcept {
    thread_state& s = local();
    if (s.nesting++ != 0) return;
    reader* r = s.rec;
    if (r == nullptr) [[unlikely]] {
      r = register_thread(s);
      if (r == nullptr) return section_fence();  // counted in overflow_ instead
    }
    // Relaxed load: a stale sequence only makes writers wait for us longer.
    // Release store: a writer's acquire load of this word then also sees our
    // previous section finished (pairs with the acquire in passed()).
    r->ctr.store(gp_seq_.load(std::memory_order_relaxed), std::memory_order_release);
    section_fence();
  }

  bool try_lock() noexcept {
    lock();
    return true;
  }

  void unlock() noexcept {
    thread_state& s = local();
    HOTPATH_ASSERT(s.nesting > 0, "rcu_domain::unlock() outside a read-side section");
    if (--s.nesting != 0) return;
    if (s.unlock_work) [[unlikely]] {
      unlock_slow(s);
      return;
    }
    // Release: the section's loads happen before a writer's acquire load of 0 in
    // passed(), which then frees what we read.
    s.rec->ctr.store(0, std::memory_order_release);
  }

  // Is the calling thread inside a read-side section of this domain?
  static bool in_read_section() noexcept { return local().nesting != 0; }

  // Returns after every read-side section that began before the call has ended.
  void synchronize() noexcept {
    HOTPATH_ASSERT(!in_read_section(), "rcu_synchronize() inside a read-side section");
    wait_for_readers(start_grace_period());
  }

  // Schedules n->rcu_reclaim(n) after a grace period, counting n->rcu_bytes. Blocks
  // only to keep the backlog within its limit (charge()).
  void retire(detail::rcu_node* n) noexcept {
    charge(n->rcu_bytes);
    retire_charged(n, n->rcu_bytes);
  }

  // Returns after every retire scheduled before the call has been reclaimed.
  void barrier() noexcept;

  // The bytes retired and not yet reclaimed, and the limit past which a retire
  // waits for a grace period (SIZE_MAX: never). A single object larger than the
  // limit is retired alone.
  std::size_t backlog_bytes() const noexcept { return backlog_.load(std::memory_order_relaxed); }
  std::size_t backlog_limit() const noexcept {
    return backlog_limit_.load(std::memory_order_relaxed);
  }
  void set_backlog_limit(std::size_t bytes) noexcept {
    backlog_limit_.store(bytes, std::memory_order_relaxed);
  }

  // The reclaimer thread: allowed (the default, started by the next retire) or not.
  // Disallowing it stops a running one and returns once it has exited: for programs
  // that must not have a thread started behind their back (call it before the first
  // retire), or that want none across a fork. Without it, batches still close by
  // size, and by age at a later retire, but nothing bounds when the last ones go:
  // call rcu_barrier(). Not from a deleter.
  void set_reclaimer_thread(bool allowed) noexcept {
    HOTPATH_ASSERT(!local().reclaiming, "set_reclaimer_thread() from a deleter");
    std::scoped_lock l(thread_mutex_);
    const std::uint32_t state = thread_state_.load(std::memory_order_relaxed);
    if (allowed) {
      if (state == thread_disallowed && detail::policy_reclaimer_thread<Policy>)
        thread_state_.store(thread_idle, std::memory_order_relaxed);
      return;
    }
    if (state == thread_running) {
      stop_.store(true, std::memory_order_relaxed);
      wake_reclaimer();
      // Acquire: what the reclaimer did happens before our return.
      while (exited_.load(std::memory_order_acquire) == 0)
        detail::park(exited_, 0);
    }
    thread_state_.store(thread_disallowed, std::memory_order_relaxed);
  }
  bool reclaimer_running() const noexcept {
    return thread_state_.load(std::memory_order_relaxed) == thread_running;
  }

  // Reader slots ever allocated (a diagnostic: bounded by the peak thread count).
  std::size_t reader_slots() const noexcept {
    std::size_t n = 0;
    for (reader* r = readers_.load(std::memory_order_acquire); r != nullptr; r = r->next)
      ++n;
    return n;
  }

 private:
  basic_rcu_domain() noexcept {
    for (reader& r : reserve_)
      r.in_use.store(false, std::memory_order_relaxed);  // before the domain is shared
    detail::membarrier_available();
    detail::at_fork(&prepare_fork, &parent_after_fork, &child_after_fork);
  }

  // fork() (detail/fork.hpp). Prepare takes reclaim_mutex_, so that no other thread
  // is inside it (reclaiming, or waiting for readers) at the fork; the child then
  // releases it and frees every other thread's reader word: those threads are gone,
  // and a word left inside a section would hold up every grace period. A thread that
  // forks from a deleter holds the mutex already. One that forks from inside a
  // section cannot wait for it (its holder may be waiting for that section): it takes
  // the mutex if free, and otherwise the child makes a fresh one (what the holder
  // was reclaiming is then leaked there; a batch it had started waits anew).
  enum class fork_hold : unsigned char { none, taken, ours, other };
  static void prepare_fork() noexcept;
  static void parent_after_fork() noexcept;
  static void child_after_fork() noexcept;

  struct alignas(cache_line_size) reader {
    atomic<std::uint64_t> ctr{0};
    atomic<bool> in_use{true};
    reader* next = nullptr;  // immutable once published
  };

  // Constant-initialised and trivially destructible: no TLS guard on the fast path.
  struct thread_state {
    reader* rec = nullptr;
    unsigned nesting = 0;
    bool reclaiming = false;
    bool no_wait = false;      // charge() must not wait (rcu_cell::update() runs f)
    bool exited = false;       // the exit hook has run (thread_local destruction)
    bool poll_due = false;     // a retire inside a section found a batch to start
    bool reserve = false;      // rec is a reserve slot, held for this section only
    bool overflow = false;     // no slot: this section is counted in overflow_
    bool unlock_work = false;  // exited, poll_due, reserve or overflow: the outermost
                               // unlock() has more to do
  };
  static thread_state& local() noexcept { return detail::policy_local<Policy, thread_state>(); }

  // Orders the store that opens a section before the section's loads; pairs with
  // heavy_fence() in start_grace_period() (membarrier, or a full fence on both sides
  // without it).
  void section_fence() const noexcept {
    if (membarrier_) {
      std::atomic_signal_fence(std::memory_order_seq_cst);
    } else {
      detail::policy_light_fence<Policy>();
    }
  }

  // Gives the slot back when the thread exits.
  struct exit_hook {
    ~exit_hook() {
      thread_state& s = local();
      s.exited = true;
      s.unlock_work = true;
      s.reserve = false;  // rec, if any, is freed below
      if (s.overflow) {   // exiting inside a section: as below
        instance().overflow_.fetch_sub(1, std::memory_order_release);
        s.overflow = false;
      }
      if (s.rec == nullptr) return;
      // A thread that exits inside a section broke a precondition; free it anyway
      // (its unlock() in a later thread_local destructor then finds no slot).
      s.rec->ctr.store(0, std::memory_order_release);
      s.rec->in_use.store(false, std::memory_order_release);  // read by claim_slot()
      s.rec = nullptr;
    }
  };

  // The outermost unlock() of a thread past its exit hook, or in a reserve slot or
  // overflow_, or with a poll due.
  [[gnu::noinline, gnu::cold]] void unlock_slow(thread_state& s) noexcept {
    if (s.overflow) {
      overflow_.fetch_sub(1, std::memory_order_release);  // as the store of 0 in unlock()
      s.overflow = false;
    } else if (reader* r = s.rec) {
      r->ctr.store(0, std::memory_order_release);  // as in unlock()
      if (s.exited || s.reserve) {
        // No exit hook will run again, or the slot was lent for this section: give it
        // back now.
        r->in_use.store(false, std::memory_order_release);  // read by claim_slot()
        s.rec = nullptr;
        s.reserve = false;
      }
    }
    // Our section is over: a batch started now does not wait for it.
    if (s.poll_due && !s.reclaiming) {
      s.poll_due = false;
      poll();
    }
    s.unlock_work = s.exited || s.poll_due;
  }

  // A slot for the thread, or null when the section is counted in overflow_.
  reader* register_thread(thread_state& s) noexcept {
    // Past the exit hook (another thread_local's destructor reads under RCU): take a
    // slot for this section only; unlock_slow() gives it back.
    if (!s.exited) (void)detail::policy_local<Policy, exit_hook>();
    if ((s.rec = claim_slot()) != nullptr) return s.rec;
    // Out of memory: a reserve slot for this section.
    for (reader& r : reserve_) {
      if (claim(r)) {
        s.reserve = s.unlock_work = true;
        return s.rec = &r;
      }
    }
    // Every reserve slot is in a section: counted, so that a reader never waits (it
    // might hold what a reserve slot's holder waits for); a writer waits for the
    // count to reach 0. Relaxed: section_fence() orders it before the section's
    // loads, as it orders the ctr store.
    overflow_.fetch_add(1, std::memory_order_relaxed);
    s.overflow = s.unlock_work = true;
    return nullptr;
  }

  static bool claim(reader& r) noexcept {
    bool expected = false;
    // Acquire pairs with the release stores of false in exit_hook and unlock_slow().
    return !r.in_use.load(std::memory_order_relaxed) &&
           r.in_use.compare_exchange_strong(expected, true, std::memory_order_acquire,
                                            std::memory_order_relaxed);
  }

  // A free slot of the list, else a new one; null when none can be allocated.
  reader* claim_slot() noexcept {
    for (reader* r = readers_.load(std::memory_order_acquire); r != nullptr; r = r->next)
      if (claim(*r)) return r;
    auto* r = new (std::nothrow) reader;
    if (r == nullptr) return nullptr;
    reader* head = readers_.load(std::memory_order_relaxed);
    do {
      r->next = head;
      // seq_cst: the push and our first ctr store come before light_fence(), so a
      // writer whose scan missed this slot is one whose removal we will see.
    } while (!readers_.compare_exchange_weak(head, r, std::memory_order_seq_cst,
                                             std::memory_order_relaxed));
    return r;
  }

  // Orders the caller's removals before every later reader's loads, then opens
  // a new sequence number t: a reader whose word is >= t began after this point.
  std::uint64_t start_grace_period() noexcept {
    detail::policy_heavy_fence<Policy>();  // pairs with light_fence() in lock()
    return gp_seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  }

  // Has r left every section that began before sequence t?
  static bool passed(const reader& r, std::uint64_t t) noexcept {
    // Acquire pairs with the release stores in lock() and unlock().
    const std::uint64_t c = r.ctr.load(std::memory_order_acquire);
    return c == 0 || c >= t;
  }

  // Calls f(reader&) for the list's slots, then the reserve slots, while it returns true.
  template <class F>
  bool for_each_reader(F&& f) {
    for (reader* r = readers_.load(std::memory_order_acquire); r != nullptr; r = r->next)
      if (!f(*r)) return false;
    for (reader& r : reserve_)
      if (!f(r)) return false;
    return true;
  }

  // Acquire pairs with the release decrements in unlock_slow() (a release sequence:
  // reading 0, the writer synchronises with every one before it).
  bool overflow_passed() const noexcept { return overflow_.load(std::memory_order_acquire) == 0; }

  bool readers_passed(std::uint64_t t) noexcept {
    return for_each_reader([&](const reader& r) { return passed(r, t); }) && overflow_passed();
  }

  // How a waiter for readers sleeps: readers never wake anybody (that would cost
  // them), so it naps, 10 us and twice as long each time up to 1 ms.
  struct napper {
    std::chrono::microseconds next{10};
    void operator()() noexcept {
      std::this_thread::sleep_for(next);
      if (next < std::chrono::milliseconds(1)) next *= 2;
    }
  };

  template <class Done>
  static void wait_until(Done&& done) noexcept {
    unsigned n = 0;
    napper nap;
    while (!done())
      if (!wait::relax(n)) nap();  // spin, yield, then nap
  }

  void wait_for_readers(std::uint64_t t) noexcept {
    for_each_reader([&](const reader& r) {
      wait_until([&] { return passed(r, t); });
      return true;
    });
    // Sections without a slot: waits for a moment with none open (sections that
    // keep overlapping hold it off; they happen only while memory is exhausted).
    wait_until([&] { return overflow_passed(); });
  }

  // Retire and reclamation: batches, the backlog, the reclaimer thread, exit
  // (defined and described in detail/rcu_reclaim.hpp).
  enum class poll_result : unsigned char { idle, in_flight, busy };
  static constexpr std::uint64_t age_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(max_batch_age).count();
  detail::rcu_node* take_pending() noexcept;
  void run(detail::rcu_node* n) noexcept;
  poll_result poll(bool take = true) noexcept;
  void charge(std::size_t bytes) noexcept;
  // Takes back a charge whose retire did not happen (rcu_cell: f or new T threw).
  void uncharge(std::size_t bytes) noexcept {
    backlog_.fetch_sub(bytes, std::memory_order_relaxed);
  }
  void retire_charged(detail::rcu_node* n, std::size_t charged) noexcept;
  [[gnu::noinline]] bool batch_started(bool first) noexcept;
  bool start_reclaimer() noexcept;
  void wake_reclaimer() noexcept;
  bool has_work() const noexcept {
    return pending_.load(std::memory_order_relaxed) != nullptr ||
           in_flight_.load(std::memory_order_relaxed);
  }
  static void* reclaimer_main(void* self) noexcept;
  void reclaim_loop() noexcept;
  static void stop_at_exit() noexcept;

  // Readers load gp_seq_ on every outermost lock(); writers bump it once per grace
  // period. The reader list head is read-mostly too; the retire state is not.
  alignas(cache_line_size) atomic<std::uint64_t> gp_seq_{1};
  // membarrier_available(), kept on the line lock() loads anyway: reading it through
  // the function's magic static costs a guard check per section. False where the
  // policy models the fences itself (tests/schedule/).
  static constexpr bool policy_fences = requires { Policy::light_fence(); };
  const bool membarrier_ = !policy_fences && detail::membarrier_available();
  atomic<reader*> readers_{nullptr};
  // Lent for one section when no slot can be allocated (register_thread()).
  static constexpr std::size_t reserve_slots = 4;
  reader reserve_[reserve_slots];
  // Open sections of threads that found no slot, no memory and no reserve slot free.
  atomic<std::uint64_t> overflow_{0};
  alignas(cache_line_size) atomic<detail::rcu_node*> pending_{nullptr};
  atomic<std::size_t> pending_count_{0};
  atomic<std::size_t> backlog_{0};  // bytes retired and not yet reclaimed
  std::atomic<std::size_t> backlog_limit_{default_backlog_limit};
  std::atomic<std::uint64_t> pending_since_{0};  // policy_now_ns() of the batch's first retire
  std::mutex reclaim_mutex_;
  detail::rcu_node* batch_ = nullptr;      // guarded by reclaim_mutex_
  std::uint64_t batch_gp_ = 0;             // guarded by reclaim_mutex_
  fork_hold fork_hold_ = fork_hold::none;  // who holds reclaim_mutex_ across a fork
  std::atomic<bool> in_flight_{false};     // batch_ != nullptr, for the reclaimer to see
  std::atomic<bool> exiting_{false};       // exit() has run stop_at_exit()
  std::atomic<bool> poll_running_{false};  // a poll() holds reclaim_mutex_

  // The reclaimer thread. thread_state_ changes under thread_mutex_.
  static constexpr std::uint32_t thread_idle = 0;  // started by the next batch
  static constexpr std::uint32_t thread_running = 1;
  static constexpr std::uint32_t thread_disallowed = 2;
  std::atomic<std::uint32_t> thread_state_{
      detail::policy_reclaimer_thread<Policy> ? thread_idle : thread_disallowed};
  std::atomic<std::uint32_t> sleeping_{0};  // the reclaimer's futex word: 1 while it sleeps
  std::atomic<bool> stop_{false};
  std::atomic<std::uint32_t> exited_{0};         // futex word: 1 once the reclaimer has stopped
  std::atomic<std::uint64_t> last_start_ns_{0};  // when a retire last tried to start it
  std::mutex thread_mutex_;
  bool exit_handler_ = false;  // guarded by thread_mutex_
};

using rcu_domain = basic_rcu_domain<>;

inline rcu_domain& rcu_default_domain() noexcept {
  return rcu_domain::instance();
}

template <class Policy = default_policy>
void rcu_synchronize(basic_rcu_domain<Policy>& dom = rcu_default_domain()) noexcept {
  dom.synchronize();
}

template <class Policy = default_policy>
void rcu_barrier(basic_rcu_domain<Policy>& dom = rcu_default_domain()) noexcept {
  dom.barrier();
}

// Schedules d(p) after a grace period in dom. Allocates one small node. `bytes` is
// what p counts against the domain's backlog limit (a hotpath extension of P2545:
// say what p owns, where that is more than sizeof(T)).
template <class T, class D = std::default_delete<T>, class Policy = default_policy>
void rcu_retire(T* p, D d = D(), basic_rcu_domain<Policy>& dom = rcu_default_domain(),
                std::size_t bytes = sizeof(T)) {
  struct box : detail::rcu_node {
    box(T* q, D&& e) : p(q), d(std::move(e)) {}
    T* p;
    D d;
  };
  auto* b = new box(p, std::move(d));
  b->rcu_reclaim = [](detail::rcu_node* n) noexcept {
    auto* self = static_cast<box*>(n);
    self->d(self->p);
    delete self;
  };
  b->rcu_bytes = bytes;
  dom.retire(b);
}

// Base of an object that retires itself with no allocation: T derives from
// rcu_obj_base<T, D>; x->retire() schedules D()(x) after a grace period. `bytes` as
// in rcu_retire().
template <class T, class D = std::default_delete<T>>
class rcu_obj_base : private detail::rcu_node {
 public:
  template <class Policy = default_policy>
  void retire(D d = D(), basic_rcu_domain<Policy>& dom = rcu_default_domain(),
              std::size_t bytes = sizeof(T)) noexcept {
    deleter_ = std::move(d);
    rcu_reclaim = &reclaim;
    rcu_bytes = bytes;
    dom.retire(static_cast<detail::rcu_node*>(this));
  }

 protected:
  rcu_obj_base() = default;
  rcu_obj_base(const rcu_obj_base&) noexcept : detail::rcu_node() {}
  rcu_obj_base(rcu_obj_base&&) noexcept : detail::rcu_node() {}
  rcu_obj_base& operator=(const rcu_obj_base&) noexcept { return *this; }
  rcu_obj_base& operator=(rcu_obj_base&&) noexcept { return *this; }
  ~rcu_obj_base() = default;

 private:
  static void reclaim(detail::rcu_node* n) noexcept {
    auto* self = static_cast<rcu_obj_base*>(n);
    D d = std::move(self->deleter_);
    d(static_cast<T*>(self));
  }

  [[no_unique_address]] D deleter_{};
};

}  // namespace hotpath
HOTPATH_VISIBILITY_END

// The domain's retire and reclamation, defined out of line.
#include "hotpath/detail/rcu_reclaim.hpp"
