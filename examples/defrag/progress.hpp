// SPDX-License-Identifier: MIT
// How a worker waits for another: it spins a bounded time (the other is usually running,
// a few packets from letting it go), then sleeps until a worker's progress may free it.
// A worker that waits never burns its core for one that does not run (more workers than
// cores, a busy process beside them), and one that makes progress pays a wake-up only
// for a sleeper it may free: the library's own rule for lock waiters (DESIGN.md),
// applied to the workers of one engine.
//
// A sleeper says what frees it: a position in the capture that the other workers must
// reach (pacing), or any progress at all (steering: what it waits for is one of
// several things). A worker that publishes a position wakes the sleepers that wait for
// no more than that; one that publishes anything else wakes those waiting for anything.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>

#include <hotpath/detail/config.hpp>  // cpu_relax(), HOTPATH_TSAN: as the locks spin and fence

namespace defrag::driver::detail {

// Spin rounds without progress before sleeping, each 16 pauses (26 us in all on this
// guest): about two positions' worth of another worker's work, far less than a time
// slice. While what it waits for keeps moving (the other worker runs), a waiter spins
// on, up to max_spin_rounds (about 0.8 ms). A sleep costs a wake-up, 100 us or more
// on this guest, which two workers on two idle cores pay now and then; waiting longer
// without progress before sleeping (100 us) made 3-8 workers on two cores 2-6x slower
// than one instead of 1.5-3x (git log of docs/defrag.md).
inline constexpr unsigned spin_rounds = 64;
inline constexpr unsigned max_spin_rounds = 2048;

class progress {
  // The store-then-load fence both sides of a sleep need (Dekker). ThreadSanitizer does
  // not model fences: there, an RMW on one word, which orders the two sides for it too.
  void full_fence() noexcept {
#if HOTPATH_TSAN
    fence_word_.fetch_add(0, std::memory_order_seq_cst);
#else
    std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
  }

 public:
  // A sleeper's need: any progress frees it. (A position need is never 0: a worker
  // whose need would be 0 is within reach of every position; reached(0) wakes only
  // these.)
  static constexpr std::size_t any = 0;

  explicit progress(std::size_t workers)
      : sleepers_(std::make_unique<sleeper[]>(workers)), workers_(workers) {}

  // One waiter's state, from its first blocked check to the check that finds it free.
  struct waiting {
    std::size_t me;
    unsigned idle = 0;   // spin rounds since what it waits for last moved
    unsigned round = 0;  // spin rounds in all
    bool registered = false;
    std::uint32_t epoch = 0;
    std::size_t seen = 0;  // what it waits for, as last seen (see wait())
  };

  // After a worker published its position `reached` in the capture.
  void reached(std::size_t position) noexcept {
    wake(position);
  }
  // After a worker made any other progress another may wait for (what it steered, room
  // freed in a ring, its start, its end).
  void advanced() noexcept {
    wake(any);
  }

  // Called each time the caller finds itself blocked; it re-checks after every return.
  // `moving` is a figure of what it waits for (the slowest position, the others'
  // steering) that changes while they make progress. Spins first, while that moves or
  // for spin_rounds after it stopped; then registers as a sleeper freed by `need` (a
  // position the others must reach, or `any`), and returns for the re-check that the
  // registration makes safe; then sleeps until woken.
  void wait(waiting& w, std::size_t need, std::size_t moving) noexcept {
    if (!w.registered) {
      if (moving != w.seen) w.seen = moving, w.idle = 0;
      if (w.idle < spin_rounds && w.round < max_spin_rounds) {
        ++w.idle;
        ++w.round;
        for (int k = 0; k < 16; ++k)
          hotpath::detail::cpu_relax();
        return;
      }
    }
    sleeper& s = sleepers_[w.me];
    if (!w.registered) {
      s.need.store(need, std::memory_order_relaxed);
      // Pairs with the fence in wake(): either the waker sees this need, or the
      // re-check after this return sees the progress it stored before its fence.
      full_fence();
      w.epoch = s.word.load(std::memory_order_acquire);
      w.registered = true;
      return;
    }
    sleeps_.fetch_add(1, std::memory_order_relaxed);
    // Returns once a waker bumped the word (or spuriously). Acquire pairs with the bump,
    // which the waker's fence orders after its progress: the re-check sees it.
    s.word.wait(w.epoch, std::memory_order_acquire);
    w.epoch = s.word.load(std::memory_order_acquire);
    // What frees it may have changed (a later position): say it before the re-check.
    s.need.store(need, std::memory_order_relaxed);
    full_fence();
  }

  // The caller is free again (its check passed).
  void done(waiting& w) noexcept {
    if (w.registered) sleepers_[w.me].need.store(never, std::memory_order_relaxed);
    w.idle = w.round = 0;
    w.registered = false;
  }

  // How often a worker went to sleep (one woken as it did so returns at once, and counts
  // too): what the run reports.
  std::int64_t sleeps() const noexcept {
    return sleeps_.load(std::memory_order_relaxed);
  }

 private:
  static constexpr std::size_t never = std::numeric_limits<std::size_t>::max();

  struct alignas(64) sleeper {
    std::atomic<std::size_t> need{never};  // not sleeping: never
    std::atomic<std::uint32_t> word{0};    // bumped to wake it
  };

  void wake(std::size_t position) noexcept {
    // Pairs with the fence in wait(): the progress stored before it is seen by a sleeper
    // that registered after it; one that registered before it is seen here.
    full_fence();
    for (std::size_t k = 0; k < workers_; ++k) {
      sleeper& s = sleepers_[k];
      const std::size_t need = s.need.load(std::memory_order_relaxed);
      if (need == never || (need != any && position != any && position < need)) continue;
      if (need != any && position == any) continue;  // not the progress it waits for
      s.word.fetch_add(1, std::memory_order_relaxed);
      s.word.notify_all();
    }
  }

  std::unique_ptr<sleeper[]> sleepers_;
  std::size_t workers_;
  alignas(64) std::atomic<std::int64_t> sleeps_{0};
  std::atomic<std::uint32_t> fence_word_{0};  // full_fence() under ThreadSanitizer
};

}  // namespace defrag::driver::detail
