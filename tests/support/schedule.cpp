// SPDX-License-Identifier: MIT
// The deterministic scheduler of schedule.hpp: its model and the property runner.
#include "schedule.hpp"

#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <semaphore>
#include <thread>
#include <unordered_map>

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

namespace hotpath::test::sched {
namespace {

constexpr unsigned max_threads = 8;  // clocks hold the main thread (0) and up to 7 more
constexpr std::uint64_t max_steps = 200000;
constexpr std::uint64_t max_idle = 2000;
using vclock = std::array<std::uint32_t, max_threads>;

void join(vclock& a, const vclock& b) noexcept {
  for (unsigned i = 0; i < max_threads; ++i)
    a[i] = a[i] < b[i] ? b[i] : a[i];
}
bool is_acquire(std::memory_order o) noexcept {
  return o == std::memory_order_acquire || o == std::memory_order_consume ||
         o == std::memory_order_acq_rel || o == std::memory_order_seq_cst;
}
bool is_release(std::memory_order o) noexcept {
  return o == std::memory_order_release || o == std::memory_order_acq_rel ||
         o == std::memory_order_seq_cst;
}
const char* order_name(std::memory_order o) noexcept {
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
struct thread_state;
void fiber_main(thread_state* t);
#if defined(__x86_64__) && defined(__linux__)
// switch(save, load): push the callee-saved registers (System V) and the SSE/x87
// control words, save rsp in *save, load rsp from load, pop them. A new fiber's stack
// is laid out as if it had switched away with r12 = its thread, r13 = fiber_main and
// a return address of start, which calls r13(r12) on a 16-byte aligned stack.
extern "C" void hotpath_schedule_switch(void** save, void* load) noexcept;
extern "C" void hotpath_schedule_start() noexcept;
asm(R"(
  .text
  .globl hotpath_schedule_switch
  .type hotpath_schedule_switch, @function
hotpath_schedule_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size hotpath_schedule_switch, .-hotpath_schedule_switch
  .globl hotpath_schedule_start
  .type hotpath_schedule_start, @function
hotpath_schedule_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size hotpath_schedule_start, .-hotpath_schedule_start
)");
struct fiber_context {
  void* sp = nullptr;
};
void fiber_init(fiber_context& c, char* stack, std::size_t size, thread_state* t) {
  auto top = (reinterpret_cast<std::uintptr_t>(stack) + size) & ~std::uintptr_t{15};
  auto* sp = reinterpret_cast<std::uint64_t*>(top - 16);  // rsp when start runs
  sp[-1] = reinterpret_cast<std::uint64_t>(&hotpath_schedule_start);
  sp[-2] = 0;                                             // rbp
  sp[-3] = 0;                                             // rbx
  sp[-4] = reinterpret_cast<std::uint64_t>(t);            // r12
  sp[-5] = reinterpret_cast<std::uint64_t>(&fiber_main);  // r13
  sp[-6] = 0;                                             // r14
  sp[-7] = 0;                                             // r15
  sp[-8] = 0x037full << 32 | 0x1f80u;                     // x87 control word, mxcsr
  c.sp = sp - 8;
}
void fiber_switch(fiber_context& from, const fiber_context& to) noexcept {
  hotpath_schedule_switch(&from.sp, to.sp);
}
#else
struct fiber_context {
  ucontext_t uc{};
};
void fiber_entry(unsigned hi, unsigned lo) {
  fiber_main(reinterpret_cast<thread_state*>(static_cast<std::uintptr_t>(hi) << 32 | lo));
}
void fiber_init(fiber_context& c, char* stack, std::size_t size, thread_state* t) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  const auto bits = reinterpret_cast<std::uintptr_t>(t);
  makecontext(&c.uc, reinterpret_cast<void (*)()>(&fiber_entry), 2,
              static_cast<unsigned>(bits >> 32), static_cast<unsigned>(bits));
}
void fiber_switch(fiber_context& from, fiber_context& to) noexcept {
  swapcontext(&from.uc, &to.uc);
}
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
world& the() {
  static world* const w = new world;  // never destroyed: threads may outlive main
  return *w;
}
thread_local thread_state* tls_self = nullptr;

thread_state& self() noexcept {
  return tls_self != nullptr ? *tls_self : the().main_state;
}
bool scheduled(const thread_state& t) noexcept {
  return &t != &the().main_state;
}
const vclock& sync_of(const location& l) noexcept {
  static const vclock none{};
  return l.gen_ == the().gen ? l.sync_ : none;
}
unsigned name_of(const void* p) {
  auto& names = the().names;
  return names.emplace(p, static_cast<unsigned>(names.size())).first->second;
}
void trace(const thread_state& me, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void trace(const thread_state& me, const char* fmt, ...) {
  if (!the().trace) return;
  std::fprintf(stderr, "%6" PRIu64 " t%u ", the().steps, me.id);
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
}

// Memory changed, or a thread woke or ended: spinners may now see something new.
void changed() noexcept {
  world& w = the();
  w.idle = 0;
  for (auto& t : w.threads)
    t->spinning = false;
}

void write_memory(location& l, std::uint64_t v, const vclock& s) noexcept {
  l.memory_ = v;
  l.sync_ = s;
  l.gen_ = the().gen;
  changed();
}

void mix(std::uint64_t v) noexcept {
  world& w = the();
  w.hash = (w.hash ^ v) * 0x100000001b3ull;
}

// May the buffer's i-th store land before the older ones? TSO: only the oldest may.
// Weak: any store no older one must precede: one to the same word (coherence), one
// before a release fence that precedes it, or any at all if it is a release store. So
// a relaxed store passes earlier stores and release stores (roach motel), and an
// acquire or relaxed RMW (which drains only the stores to its own word) passes them too.
bool may_land(const thread_state& t, std::size_t i) noexcept {
  const pending& e = t.buffer[i];
  if (i == 0) return true;
  if (!the().p.weak || e.release || t.buffer.front().epoch != e.epoch) return false;
  for (std::size_t j = 0; j < i; ++j)
    if (t.buffer[j].loc == e.loc) return false;
  return true;
}

// The buffer's i-th store lands in memory.
void land(thread_state& t, std::size_t i) noexcept {
  mix(100 + t.id + 1000 * i);
  const pending e = t.buffer[i];
  t.buffer.erase(t.buffer.begin() + static_cast<std::ptrdiff_t>(i));
  trace(t, "drain L%u = %" PRIu64 "%s", name_of(e.loc), e.value, i != 0 ? " (out of order)" : "");
  write_memory(*e.loc, (e.loc->memory_ & ~e.mask) | (e.value & e.mask), e.sync);
}
// Drains the oldest store of t's buffer (TSO), or, in the weak mode, a random one of
// those that may land first.
void flush_one(thread_state& t) noexcept {
  world& w = the();
  std::size_t i = 0;
  if (w.p.weak && t.buffer.size() > 1) {
    std::size_t can[64];
    unsigned n = 0;
    for (std::size_t k = 0; k < t.buffer.size() && n < 64; ++k)
      if (may_land(t, k)) can[n++] = k;
    i = can[w.r.below(n)];
  }
  land(t, i);
}
void flush_all(thread_state& t) noexcept {
  while (!t.buffer.empty())
    land(t, 0);
}
// Drains the stores to l and every older one (more than the weak mode needs: it keeps
// the model simple, and what it forbids is a subset of what C++ allows).
void flush_to(thread_state& t, const location& l) noexcept {
  std::size_t n = 0;
  for (std::size_t k = 0; k < t.buffer.size(); ++k)
    if (t.buffer[k].loc == &l) n = k + 1;
  while (n-- > 0)
    land(t, 0);
}
// Drains a store of a random non-empty buffer (flush_one()); false if all are empty.
bool flush_random() noexcept {
  world& w = the();
  thread_state* with[max_threads];
  unsigned n = 0;
  for (auto& t : w.threads)
    if (!t->buffer.empty()) with[n++] = t.get();
  if (n == 0) return false;
  flush_one(*with[w.r.below(n)]);
  return true;
}

std::string describe_threads() {
  world& w = the();
  std::string s;
  char buf[160];
  for (auto& t : w.threads) {
    const char* st = t->st == status::runnable  ? (t->spinning ? "spinning" : "runnable")
                     : t->st == status::blocked ? "sleeping"
                                                : "finished";
    std::snprintf(buf, sizeof buf, "  t%u %s", t->id, st);
    s += buf;
    if (t->st == status::blocked) {
      std::snprintf(buf, sizeof buf, " on word L%u channel %u (memory holds %" PRIu64 ")",
                    name_of(t->park_loc), t->park_channel, t->park_loc->memory_);
      s += buf;
    }
    if (!t->buffer.empty()) {
      std::snprintf(buf, sizeof buf, ", %zu store(s) buffered", t->buffer.size());
      s += buf;
    }
    s += '\n';
  }
  return s;
}

// The next thread to run after `me` reached a scheduling point (me may have just
// gone to sleep or finished). nullptr: every thread has finished.
thread_state* pick(thread_state& me) {
  world& w = the();
  for (;;) {
    thread_state* ready[max_threads];
    unsigned n = 0;
    for (auto& t : w.threads)
      if (t->st == status::runnable && !t->spinning) ready[n++] = t.get();
    if (n > 0) {
      if (me.st == status::runnable && !me.spinning && !w.r.percent(w.p.preempt)) return &me;
      return ready[w.r.below(n)];
    }
    thread_state* spinners[max_threads];
    unsigned m = 0;
    bool sleeping = false;
    for (auto& t : w.threads) {
      if (t->st == status::runnable) spinners[m++] = t.get();
      if (t->st == status::blocked) sleeping = true;
    }
    if (m == 0) {
      if (sleeping) fail("deadlock: every unfinished thread sleeps (a lost wake-up)");
      return nullptr;
    }
    // Every runnable thread spins: drain a store if one is buffered, else let one
    // spinner look again (it may decide to park); nothing changing for long is a livelock.
    if (flush_random()) continue;
    if (++w.idle > max_idle) fail("livelock: every thread spins and nothing can change");
    thread_state* t = spinners[w.r.below(m)];
    t->spinning = false;
    return t;
  }
}

// Makes `next` the running thread. With fibers, returns when `me` runs again (never,
// for a finished `me`); with threads, at once: the caller waits on me.go if it must.
void hand_over(thread_state& me, thread_state* next) {
  the().current = next;
#if HOTPATH_SCHEDULE_FIBERS
  tls_self = next;
  fiber_switch(me.ctx, next->ctx);
#else
  (void)me;
  next->go.release();
#endif
}

void switch_to(thread_state& me, thread_state* next) {
  if (next == &me) return;
  hand_over(me, next);
#if !HOTPATH_SCHEDULE_FIBERS
  me.go.acquire();
#endif
}

// A scheduling point of the calling thread.
void point(thread_state& me) {
  if (!scheduled(me)) return;
  world& w = the();
  if (++w.steps > max_steps) fail("livelock: the run did not end within the step budget");
  if (w.r.percent(w.p.flush)) flush_random();
  if (w.p.spurious != 0 && w.r.percent(w.p.spurious)) {
    for (auto& t : w.threads) {
      if (t->st == status::blocked) {
        trace(*t, "spurious wake-up");
        t->st = status::runnable;
        t->park_loc = nullptr;
        changed();
        break;
      }
    }
  }
  thread_state* next = pick(me);
  mix(next->id);
  switch_to(me, next);
}

// The end of a scheduled thread: its local<T>()s go first (newest first, still
// under the scheduler: their destructors may use the model), then it hands over.
void finish(thread_state& me) {
  world& w = the();
  while (!me.locals.empty()) {
    const local_slot l = me.locals.back();
    me.locals.pop_back();
    l.destroy(l.p);
  }
  trace(me, "finished");
  me.st = status::finished;
  join(w.main_state.vc, me.vc);  // what join() gives the main thread
  changed();
  thread_state* next = pick(me);
  if (next == nullptr) {
    // What is still buffered lands as it would have meanwhile: in any order the
    // model allows, not thread by thread (which would hide a late store of one
    // thread landing over another's).
    while (flush_random()) {
    }
    w.current = nullptr;
#if HOTPATH_SCHEDULE_FIBERS
    tls_self = nullptr;
    fiber_switch(me.ctx, w.main_ctx);  // never returns: nothing resumes a finished fiber
#else
    w.done.release();
    return;
#endif
  }
  hand_over(me, next);
}

#if HOTPATH_SCHEDULE_FIBERS
constexpr std::size_t fiber_stack = 256 * 1024;
void fiber_main(thread_state* t) {
  t->body();
  finish(*t);  // never returns
}
#endif

void check_write_before(const shadow& s, const thread_state& me, const char* what) {
  world& w = the();
  if (s.write_gen == w.gen && s.write_tid != me.id && s.write_clock > me.vc[s.write_tid]) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "data race: %s of D%u by t%u is not ordered after the write by t%u", what,
                  name_of(&s), me.id, s.write_tid);
    fail(buf);
  }
}

}  // namespace

// ---- location ------------------------------------------------------------------

location::location(std::uint64_t v) noexcept : memory_(v) {}

location::~location() {
  destroyed_ = true;
  world& w = the();
  if (!w.active) return;
  const thread_state& me = self();
  for (auto& t : w.threads) {
    for (auto it = t->buffer.begin(); it != t->buffer.end();) {
      if (it->loc != this) {
        ++it;
        continue;
      }
      if (t.get() != &me) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "t%u destroys L%u while t%u's store to it is still buffered",
                      me.id, name_of(this), t->id);
        fail(buf);
      }
      it = t->buffer.erase(it);
    }
  }
}

// An access to a location whose destructor has run (its memory kept by the
// graveyard): a use after free.
void location::check_alive(const char* what) const noexcept {
  if (!destroyed_) return;
  char buf[160];
  std::snprintf(buf, sizeof buf, "t%u %s L%u after its destruction (use after free)", self().id,
                what, name_of(this));
  fail(buf);
}

std::uint64_t location::load(std::memory_order o) const noexcept {
  thread_state& me = self();
  point(me);
  check_alive("loads");
  // The thread's own buffered stores to this location, newest last, over memory (a
  // partial store shows memory's other bits; a full one hides memory altogether).
  std::uint64_t v = memory_;
  bool own = false, whole = false;
  for (const pending& e : me.buffer) {
    if (e.loc != this) continue;
    v = (v & ~e.mask) | (e.value & e.mask);
    own = true;
    whole = whole || e.mask == ~std::uint64_t{0};
  }
  if (whole) {
    trace(me, "load L%u %s -> %" PRIu64 " (own buffer)", name_of(this), order_name(o), v);
    return v;
  }
  join(is_acquire(o) ? me.vc : me.acq_pending, sync_of(*this));
  trace(me, "load L%u %s -> %" PRIu64 "%s", name_of(this), order_name(o), v,
        own ? " (partly own buffer)" : "");
  return v;
}

void location::store(std::uint64_t v, std::memory_order o) noexcept {
  store_bits(~std::uint64_t{0}, v, o);
}

void location::store_bits(std::uint64_t mask, std::uint64_t v, std::memory_order o) noexcept {
  thread_state& me = self();
  point(me);
  check_alive("stores to");
  const vclock s = is_release(o) ? me.vc : me.fence_rel;
  trace(me, "store L%u %s = %" PRIu64 " (mask %" PRIx64 ")", name_of(this), order_name(o), v, mask);
  if (scheduled(me)) {
    me.buffer.push_back({this, v, s, mask, is_release(o), me.fence_epoch});
  } else {
    write_memory(*this, (memory_ & ~mask) | (v & mask), s);
  }
  if (is_release(o)) ++me.vc[me.id];
  if (o == std::memory_order_seq_cst) flush_all(me);
}

std::uint64_t location::rmw(std::memory_order success, std::memory_order failure, rmw_fn f,
                            const void* ctx, bool weak, bool& done) noexcept {
  thread_state& me = self();
  point(me);
  check_alive("modifies");
  // x86's locked instruction drains the store buffer. Weaker (ARM's ldaxr/stlxr, C++):
  // only a release RMW waits for the earlier stores; the others see their own word's.
  world& w = the();
  if (!w.p.weak || is_release(success)) {
    flush_all(me);
  } else {
    // What precedes a release fence lands before any later store, this one too.
    while (!me.buffer.empty() && me.buffer.front().epoch != me.fence_epoch)
      land(me, 0);
    flush_to(me, *this);
  }
  const std::uint64_t old = memory_;
  const vclock cur = sync_of(*this);
  std::uint64_t next = old;
  bool ok = f(ctx, old, next);
  if (ok && weak && scheduled(me) && w.p.weak_fail != 0 && w.r.percent(w.p.weak_fail)) ok = false;
  const std::memory_order o = ok ? success : failure;
  join(is_acquire(o) ? me.vc : me.acq_pending, cur);
  if (ok) {
    vclock s = cur;  // an RMW continues the release sequence it reads from
    join(s, is_release(o) ? me.vc : me.fence_rel);
    write_memory(*this, next, s);
    if (is_release(o)) ++me.vc[me.id];
    trace(me, "rmw L%u %s %" PRIu64 " -> %" PRIu64, name_of(this), order_name(o), old, next);
  } else {
    trace(me, "rmw L%u %s %" PRIu64 " (failed)", name_of(this), order_name(o), old);
  }
  done = ok;
  return old;
}

// ---- fences, parking, decisions -------------------------------------------------

void yield_point() noexcept {
  point(self());
}

void fence(std::memory_order o) noexcept {
  thread_state& me = self();
  point(me);
  trace(me, "fence %s", order_name(o));
  if (is_acquire(o)) join(me.vc, me.acq_pending);
  if (is_release(o)) {
    me.fence_rel = me.vc;
    ++me.vc[me.id];
    ++me.fence_epoch;  // later stores land after the earlier ones (may_land())
  }
  if (o == std::memory_order_seq_cst) flush_all(me);
}

void light_fence() noexcept {
  if (the().p.membarrier) {
    point(self());  // a compiler barrier: nothing to model
  } else {
    fence(std::memory_order_seq_cst);
  }
}

void heavy_fence() noexcept {
  world& w = the();
  if (!w.p.membarrier) {
    fence(std::memory_order_seq_cst);
    return;
  }
  thread_state& me = self();
  point(me);
  trace(me, "membarrier: every buffer drains");
  // Every running thread executes a full barrier; a sleeping one has been through
  // a context switch. No happens-before: membarrier orders, it does not synchronise.
  flush_all(me);
  for (auto& t : w.threads)
    flush_all(*t);
}

bool spin() noexcept {
  thread_state& me = self();
  if (!scheduled(me)) {
    std::this_thread::yield();
    return true;
  }
  me.spinning = true;
  point(me);
  world& w = the();
  return !w.r.percent(w.p.park);
}

void park(location& l, std::uint32_t expected, unsigned channel) noexcept {
  thread_state& me = self();
  if (!scheduled(me)) return;
  point(me);
  flush_all(me);  // a system call
  if (static_cast<std::uint32_t>(l.memory_) != expected) {
    trace(me, "park L%u: holds %" PRIu64 ", not %u", name_of(&l), l.memory_, expected);
    return;
  }
  trace(me, "park L%u channel %u", name_of(&l), channel % 32);
  me.st = status::blocked;
  me.park_loc = &l;
  me.park_channel = channel % 32;
  thread_state* next = pick(me);  // never null: me sleeps, so none runnable is a deadlock
  mix(next->id);
  switch_to(me, next);
}

void unpark(location& l, unsigned channel, int count, bool all_channels) noexcept {
  thread_state& me = self();
  if (!scheduled(me)) return;
  point(me);
  flush_all(me);  // a system call
  world& w = the();
  thread_state* sleepers[max_threads];
  unsigned n = 0;
  for (auto& t : w.threads)
    if (t->st == status::blocked && t->park_loc == &l &&
        (all_channels || t->park_channel == channel % 32))
      sleepers[n++] = t.get();
  trace(me, "wake L%u channel %u: %u sleeper(s)", name_of(&l), channel % 32, n);
  for (int woken = 0; n > 0 && (count < 0 || woken < count); ++woken) {
    const unsigned i = w.r.below(n);
    sleepers[i]->st = status::runnable;
    sleepers[i]->park_loc = nullptr;
    sleepers[i] = sleepers[--n];
    changed();
  }
}

unsigned choose(unsigned n) noexcept {
  thread_state& me = self();
  if (!scheduled(me)) return 0;
  point(me);
  return the().r.below(n);
}

unsigned thread_id() noexcept {
  return self().id;
}

// ---- data ----------------------------------------------------------------------

void note_read(shadow& s) noexcept {
  world& w = the();
  thread_state& me = self();
  if (s.destroyed) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "t%u reads D%u after its destruction (use after free)", me.id,
                  name_of(&s));
    fail(buf);
  }
  check_write_before(s, me, "read");
  if (s.reads_gen != w.gen) {
    s.reads = {};
    s.reads_gen = w.gen;
  }
  s.reads[me.id] = me.vc[me.id];
}

void note_write(shadow& s) noexcept {
  world& w = the();
  thread_state& me = self();
  check_write_before(s, me, "write");
  if (s.reads_gen == w.gen) {
    for (unsigned u = 0; u < max_threads; ++u) {
      if (u != me.id && s.reads[u] > me.vc[u]) {
        char buf[200];
        std::snprintf(buf, sizeof buf,
                      "data race: write of D%u by t%u is not ordered after the read by t%u",
                      name_of(&s), me.id, u);
        fail(buf);
      }
    }
  }
  s.write_gen = w.gen;
  s.write_tid = me.id;
  s.write_clock = me.vc[me.id];
  s.reads = {};
  s.reads_gen = w.gen;
}

void note_destroy(shadow& s) noexcept {
  note_write(s);
  s.destroyed = true;
}

void* local_get(const void* key) noexcept {
  for (const local_slot& l : self().locals)
    if (l.key == key) return l.p;
  return nullptr;
}
void local_put(const void* key, void* p, void (*destroy)(void*)) {
  self().locals.push_back({key, p, destroy});
}

void* graveyard_new(std::size_t n) {
  return ::operator new(n);
}
void graveyard_delete(void* p) noexcept {
  the().graveyard.push_back(p);
}

// ---- run -----------------------------------------------------------------------

void run(std::vector<std::function<void()>> bodies) {
  world& w = the();
  if (bodies.empty() || bodies.size() >= max_threads) fail("run(): 1 to 7 threads");
  ++w.gen;
  w.threads.clear();
  w.main_state.vc = {};
  w.main_state.vc[0] = 1;
  w.main_state.fence_rel = {};
  w.main_state.acq_pending = {};
  w.steps = 0;
  w.idle = 0;
  w.hash = 0xcbf29ce484222325ull;
  w.names.clear();
  for (unsigned i = 0; i < bodies.size(); ++i) {
    auto t = std::make_unique<thread_state>();
    t->id = i + 1;
    t->vc = w.main_state.vc;  // thread start: everything the main thread did so far
    t->vc[t->id] = 1;
    t->body = std::move(bodies[i]);
    w.threads.push_back(std::move(t));
  }
  ++w.main_state.vc[0];
  w.active = true;
  thread_state* first = w.threads[w.r.below(static_cast<unsigned>(w.threads.size()))].get();
  w.current = first;
#if HOTPATH_SCHEDULE_FIBERS
  for (auto& t : w.threads) {
    thread_state* ts = t.get();
    std::unique_ptr<char[]>& stack = w.stacks[ts->id];
    if (stack == nullptr) stack.reset(new char[fiber_stack]);
    fiber_init(ts->ctx, stack.get(), fiber_stack, ts);
  }
  tls_self = first;
  fiber_switch(w.main_ctx, first->ctx);  // back when every thread has finished
  tls_self = nullptr;
#else
  for (auto& t : w.threads) {
    thread_state* ts = t.get();
    ts->th = std::thread([ts] {
      tls_self = ts;
      ts->go.acquire();
      ts->body();
      finish(*ts);
    });
  }
  first->go.release();
  if (!w.done.try_acquire_for(std::chrono::seconds(120)))
    fail("hang: a thread blocked outside the scheduler for 120 s");
  for (auto& t : w.threads)
    t->th.join();
#endif
  w.active = false;
  w.total_steps += w.steps;
  if (w.print_hashes) std::printf("seed %" PRIu64 " hash %016" PRIx64 "\n", w.seed, w.hash);
}

void setup(const std::function<void()>& f) {
  world& w = the();
  const rng r = w.r;
  const params p = w.p;
  const bool print = w.print_hashes;
  w.r = rng{0x5e70};
  w.p = params{};
  w.print_hashes = false;
  f();
  w.r = r;
  w.p = p;
  w.print_hashes = print;
}

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
