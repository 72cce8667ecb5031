// SPDX-License-Identifier: MIT
// The deterministic scheduler's memory (schedule.hpp): store buffers that drain in
// TSO or in weak order, the locations' loads, stores and RMWs, fences, and the race
// and use-after-free checks of plain data.
#include <cinttypes>
#include <cstdio>

#include "schedule_world.hpp"

namespace hotpath::test::sched {

using namespace model;

namespace model {

const vclock& sync_of(const location& l) noexcept {
  static const vclock none{};
  return l.gen_ == the().gen ? l.sync_ : none;
}

void write_memory(location& l, std::uint64_t v, const vclock& s) noexcept {
  l.memory_ = v;
  l.sync_ = s;
  l.gen_ = the().gen;
  changed();
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

}  // namespace model

namespace {

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

// ---- fences ---------------------------------------------------------------------

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

void* graveyard_new(std::size_t n) {
  return ::operator new(n);
}
void graveyard_delete(void* p) noexcept {
  the().graveyard.push_back(p);
}

}  // namespace hotpath::test::sched
