// SPDX-License-Identifier: MIT
// Thread slots: small integers naming the live threads, the user-space stand-in for
// the kernel's cpu number. queued_lock encodes (slot + 1) in 14 bits of its word,
// so at most max_slots threads hold a slot at once; a thread that cannot get one
// (more live threads than that, or a test lowering the limit) gets no_slot and the
// caller must cope without (queued_lock falls back to trylock-and-park).
//
// A thread takes a slot on first use and returns it when it exits (a thread_local
// whose destructor runs at thread exit); the next thread reuses it, so slot numbers
// stay dense and per-slot tables stay small. Handing slots out takes a mutex: it
// happens once per thread, never on a lock's fast path. Because of that mutex (and
// the allocations beside it: the exit hook), a thread's first this_thread_slot()
// must not run in a signal handler (it could interrupt the same thread inside the
// mutex); a user of the slots offers a preparation call that takes the slot and
// creates the thread's blocks (queued_lock::prepare_thread()). Out of memory, take()
// refuses (no_slot), give_back() leaks the slot and slot_table::find_or_create()
// returns nullptr; none of them throws or terminates (the registry itself lives in
// static storage). glibc's own allocation for the exit hook's thread_local aborts.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>
#include <vector>

#include "hotpath/detail/config.hpp"
#include "hotpath/detail/fork.hpp"

HOTPATH_VISIBILITY_BEGIN
namespace hotpath::detail {

class thread_slot_registry {
 public:
  static constexpr std::uint32_t max_slots = (1u << 14) - 1;  // slot + 1 fits 14 bits
  static constexpr std::uint32_t no_slot = ~std::uint32_t{0};

  // Never destroyed: a thread (a detached one, say) may exit, and give its slot
  // back, during or after exit()'s static destructors.
  static thread_slot_registry& instance() noexcept {
    static thread_slot_registry& r = make();
    return r;
  }

  // This thread's slot, taken on first call; no_slot if none is free (asked again
  // next time, cheaply: a relaxed load tells whether one could be free).
  static std::uint32_t this_thread_slot() noexcept {
    local& l = local_state();
    if (l.slot_plus_1 != 0) return l.slot_plus_1 - 1;
    if (l.exited) return no_slot;  // called from a later thread_local destructor
    const errno_keeper keep;       // a magic static, a mutex, an allocation
    return instance().take(l);
  }

  // Live slots may not exceed `n` (clamped to max_slots); for tests of the overflow path.
  // Threads already holding a slot keep it.
  void set_limit(std::uint32_t n) noexcept {
    limit_.store(n < max_slots ? n : max_slots, std::memory_order_relaxed);
  }
  std::uint32_t limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
  // Statistics (snapshots): slots held now, distinct slot numbers ever handed out,
  // and requests refused because none was free.
  std::uint32_t live() const noexcept { return live_.load(std::memory_order_relaxed); }
  std::uint32_t high_water() const noexcept { return high_water_.load(std::memory_order_relaxed); }
  std::uint64_t refusals() const noexcept { return refusals_.load(std::memory_order_relaxed); }

 private:
  struct local {
    std::uint32_t slot_plus_1 = 0;  // 0: no slot
    bool exited = false;
  };
  // Trivially destructible, so it is usable until the very end of the thread.
  static local& local_state() noexcept {
    thread_local local l;
    return l;
  }
  // Its destructor returns the slot when the thread exits.
  struct reaper {
    ~reaper() {
      local& l = local_state();
      const std::uint32_t s = l.slot_plus_1;
      l.slot_plus_1 = 0;
      l.exited = true;
      if (s != 0) instance().give_back(s - 1);
    }
  };

  // In static storage: instance() is noexcept, and a first use out of memory must not
  // terminate.
  static thread_slot_registry& make() noexcept {
    alignas(thread_slot_registry) static unsigned char storage[sizeof(thread_slot_registry)];
    auto* r = new (storage) thread_slot_registry;
    at_fork(&prepare_fork, &parent_after_fork, &child_after_fork);
    return *r;
  }

  // fork(): no thread may be inside mu_ at the fork (prepare takes it); in the child
  // the forking thread is the only one alive, so every other slot is free again.
  static void prepare_fork() noexcept { instance().mu_.lock(); }
  static void parent_after_fork() noexcept { instance().mu_.unlock(); }
  static void child_after_fork() noexcept {
    thread_slot_registry& r = instance();
    const std::uint32_t mine = local_state().slot_plus_1;  // 0: none
    const std::uint32_t high = r.high_water_.load(std::memory_order_relaxed);
    try {
      r.free_.reserve(high);  // may throw: then nothing changes (slots stay taken)
      r.free_.clear();
      for (std::uint32_t s = high; s-- > 0;) {  // lowest numbers reused first
        if (s + 1 != mine) r.free_.push_back(s);
      }
      r.live_.store(mine != 0 ? 1 : 0, std::memory_order_relaxed);
    } catch (...) {
    }
    r.mu_.unlock();
  }

  std::uint32_t take(local& l) noexcept {
    if (live_.load(std::memory_order_relaxed) >= limit()) {
      refusals_.fetch_add(1, std::memory_order_relaxed);
      return no_slot;
    }
    std::uint32_t s;
    try {
      // Registers the exit hook first (it may allocate): it returns nothing while
      // slot_plus_1 is 0.
      thread_local reaper r;
      (void)r;
      std::lock_guard g(mu_);
      if (live_.load(std::memory_order_relaxed) >= limit()) {
        refusals_.fetch_add(1, std::memory_order_relaxed);
        return no_slot;
      }
      if (!free_.empty()) {
        s = free_.back();
        free_.pop_back();
      } else {
        // Every number below high_water_ is in use, so this stays below limit().
        s = high_water_.load(std::memory_order_relaxed);
        high_water_.store(s + 1, std::memory_order_relaxed);
      }
      live_.store(live_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    } catch (...) {  // bad_alloc, or a system_error from the mutex
      refusals_.fetch_add(1, std::memory_order_relaxed);
      return no_slot;
    }
    l.slot_plus_1 = s + 1;
    return s;
  }

  void give_back(std::uint32_t s) noexcept {
    try {
      std::lock_guard g(mu_);
      free_.push_back(s);
      live_.store(live_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    } catch (...) {
      // Out of memory: the slot stays counted as live and is never reused, so the
      // numbers handed out stay below limit().
    }
  }

  std::mutex mu_;
  std::vector<std::uint32_t> free_;  // returned slots, reused last-in first-out
  std::atomic<std::uint32_t> limit_{max_slots};
  std::atomic<std::uint32_t> live_{0};
  std::atomic<std::uint32_t> high_water_{0};
  std::atomic<std::uint64_t> refusals_{0};
};

// Per-slot storage of `Block`s for the slots handed out so far: chunks allocated on
// first use and never freed (a slot's next owner reuses its block), so a pointer
// into it stays valid for the life of the process. Lookup is two loads. Creating a
// chunk takes no lock (a CAS publishes it), so a thread whose block exists never
// allocates or blocks here again, in a signal handler or anywhere.
template <class Block>
class slot_table {
  static constexpr std::uint32_t chunk_size = 64;
  static constexpr std::uint32_t chunks =
      (thread_slot_registry::max_slots + chunk_size) / chunk_size;

 public:
  // The block of slot `s`, allocating its chunk if needed; nullptr if out of memory.
  static Block* find_or_create(std::uint32_t s) noexcept {
    std::atomic<Block*>& c = table_[s / chunk_size];
    // Acquire pairs with the release CAS below: the chunk's blocks are constructed.
    Block* chunk = c.load(std::memory_order_acquire);
    if (chunk == nullptr) [[unlikely]] {
      const errno_keeper keep;  // malloc sets ENOMEM when it fails
      Block* fresh = new (std::nothrow) Block[chunk_size];
      if (fresh == nullptr) return nullptr;
      // Release publishes the constructed blocks; acquire on failure pairs with the
      // winner's release.
      if (c.compare_exchange_strong(chunk, fresh, std::memory_order_release,
                                    std::memory_order_acquire)) {
        chunk = fresh;
      } else {
        delete[] fresh;  // another slot of the chunk got there first
      }
    }
    return &chunk[s % chunk_size];
  }
  // The block of a slot that another thread has already created and published.
  static Block& get(std::uint32_t s) noexcept {
    return table_[s / chunk_size].load(std::memory_order_acquire)[s % chunk_size];
  }

 private:
  static inline std::atomic<Block*> table_[chunks] = {};
};

}  // namespace hotpath::detail
HOTPATH_VISIBILITY_END
