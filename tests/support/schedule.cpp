// SPDX-License-Identifier: MIT
// The deterministic scheduler of schedule.hpp: its threads (fibers, or real threads
// under a sanitizer), the scheduling points and the choice of who runs next, parking,
// and the run itself. The memory model is in schedule_memory.cpp, the property runner
// in schedule_runner.cpp.
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>

#include "schedule_world.hpp"

namespace hotpath::test::sched {

using namespace model;

namespace model {

thread_local thread_state* tls_self = nullptr;

#if HOTPATH_SCHEDULE_FIBERS
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

void mix(std::uint64_t v) noexcept {
  world& w = the();
  w.hash = (w.hash ^ v) * 0x100000001b3ull;
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

}  // namespace model

// ---- fences, parking, decisions -------------------------------------------------

void yield_point() noexcept {
  point(self());
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

void* local_get(const void* key) noexcept {
  for (const local_slot& l : self().locals)
    if (l.key == key) return l.p;
  return nullptr;
}
void local_put(const void* key, void* p, void (*destroy)(void*)) {
  self().locals.push_back({key, p, destroy});
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
}  // namespace hotpath::test::sched
