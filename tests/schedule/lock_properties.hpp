// SPDX-License-Identifier: MIT
// Properties every lock explored here must have, as bodies for sched::run().
#pragma once

#include <array>
#include <cstdint>

#include "support/schedule.hpp"

namespace hotpath::test::sched {

// Mutual exclusion: each of `threads` threads enters `rounds` critical sections
// through enter()/leave(). Inside, a plain (race-checked) owner word must be free
// and stay ours across a scheduling point, and a plain counter is incremented. Any
// overlap, or an entry not ordered after the previous exit (a missing acquire or
// release), is a failure; so is a deadlock, i.e. a lost wake-up.
template <class Enter, class Leave>
void mutual_exclusion(unsigned threads, unsigned rounds, Enter enter, Leave leave) {
  data<unsigned> owner(0);
  data<unsigned> count(0);
  run(threads, [&](unsigned id) {
    for (unsigned r = 0; r < rounds; ++r) {
      enter(r);
      check(owner.read() == 0, "entered while another thread is inside");
      owner.write(id);
      yield_point();
      count.write(count.read() + 1);
      check(owner.read() == id, "another thread entered meanwhile");
      owner.write(0);
      leave(r);
    }
  });
  check(count.read() == threads * rounds, "every critical section counted once");
}

// The same with each thread's first section taken by try_lock() (retried until it
// succeeds): try_lock() must succeed only on a free lock.
template <class Lock>
void mutual_exclusion_with_try_lock(Lock& lock, unsigned threads, unsigned rounds) {
  mutual_exclusion(
      threads, rounds,
      [&](unsigned r) {
        if (r == 0) {
          while (!lock.try_lock())
            (void)spin();  // a spinner: not picked again until memory changes
        } else {
          lock.lock();
        }
      },
      [&](unsigned) { lock.unlock(); });
}

// FIFO bookkeeping: a thread inside enter() is queued once its wait strategy first
// spins (a lock calls relax() only after the waiter has taken its place in the
// queue; an unlock() may spin too, for a successor, which does not count).
struct fifo_book {
  std::array<bool, 8> entering{};
  std::array<bool, 8> queued{};
  std::array<unsigned, 8> entries{};
};
inline fifo_book fifo;  // touched only by the scheduled thread that runs

template <class W>
struct fifo_wait {
  static constexpr bool parks = W::parks;
  static bool relax(unsigned& n) noexcept {
    if (fifo.entering[thread_id()]) fifo.queued[thread_id()] = true;
    return W::relax(n);
  }
  static void yield() noexcept { W::yield(); }
};

// FIFO: a thread that calls enter() while another is already queued does not get
// in before that one.
template <class Enter, class Leave>
void fifo_order(unsigned threads, unsigned rounds, Enter enter, Leave leave) {
  fifo = {};
  run(threads, [&](unsigned id) {
    for (unsigned r = 0; r < rounds; ++r) {
      std::array<unsigned, 8> need{};  // entries each earlier waiter must have reached
      for (unsigned t = 1; t <= threads; ++t)
        if (t != id && fifo.queued[t]) need[t] = fifo.entries[t] + 1;
      fifo.entering[id] = true;
      enter(r);
      fifo.entering[id] = false;
      fifo.queued[id] = false;
      ++fifo.entries[id];
      for (unsigned t = 1; t <= threads; ++t)
        check(fifo.entries[t] >= need[t], "overtook a thread that was queued before it");
      yield_point();
      leave(r);
    }
  });
}

}  // namespace hotpath::test::sched
