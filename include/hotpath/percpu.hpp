// SPDX-License-Identifier: MIT
// Per-cpu storage: which cpu am I on, and one T per possible cpu.
//
// current_cpu() reads the cpu number that the kernel keeps up to date in the
// thread's rseq area (one load, no system call); where no rseq area is registered it
// asks sched_getcpu(), and where that fails too it returns a per-thread hash, which
// still spreads threads over the slots.
//
// In user space the answer can be stale by the time it is used: the thread may move
// to another cpu at any instruction. percpu<T> therefore only promises that
// local() is *usually* this cpu's slot, so threads rarely share a line; two threads
// may touch the same slot at once, and T must tolerate that (an atomic, or a
// per-slot lock). percpu_counter.hpp adds the restartable-sequence fast path that
// makes a plain add on the current cpu's slot safe.
//
// Slots are sized by the POSSIBLE cpu set (/sys/devices/system/cpu/possible), not the
// online count: a cpu brought online later, or a sparse numbering, still has a slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iterator>
#include <memory>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>

#include "hotpath/detail/config.hpp"
#include "hotpath/detail/rseq.hpp"

#if defined(__linux__)
#include <sched.h>
#include <unistd.h>
#endif

HOTPATH_VISIBILITY_BEGIN
namespace hotpath {

namespace detail {

// Highest cpu number in a list such as "0-3,8-11" plus one; 0 if unreadable.
inline unsigned parse_cpu_list(const char* s) noexcept {
  unsigned best = 0;
  unsigned n = 0;
  bool digits = false;
  for (;; ++s) {
    if (*s >= '0' && *s <= '9') {
      n = n * 10 + static_cast<unsigned>(*s - '0');
      digits = true;
      continue;
    }
    if (digits && n + 1 > best) best = n + 1;
    n = 0;
    digits = false;
    if (*s == '\0' || *s == '\n') break;
  }
  return best;
}

inline unsigned count_possible_cpus() noexcept {
  unsigned n = 0;
#if defined(__linux__)
  if (std::FILE* f = std::fopen("/sys/devices/system/cpu/possible", "r")) {
    char buf[256] = {};
    if (std::fgets(buf, sizeof buf, f) != nullptr) n = parse_cpu_list(buf);
    std::fclose(f);
  }
  if (n == 0) {
    const long conf = sysconf(_SC_NPROCESSORS_CONF);
    if (conf > 0) n = static_cast<unsigned>(conf);
  }
#endif
  if (n == 0) n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

// Where neither rseq nor sched_getcpu() knows: a stable per-thread number.
inline unsigned thread_hash() noexcept {
  thread_local const unsigned h =
      static_cast<unsigned>(std::hash<std::thread::id>{}(std::this_thread::get_id()) >> 4);
  return h;
}

}  // namespace detail

// The number of possible cpus (highest possible cpu number + 1), read once.
inline unsigned possible_cpus() noexcept {
  static const unsigned n = detail::count_possible_cpus();
  return n;
}

// The cpu the caller is running on (a hint: it may change at once). From the rseq
// area glibc registers, else sched_getcpu(), else a per-thread hash.
inline unsigned current_cpu() noexcept {
  const int cpu = detail::rseq_cpu_id();
  if (cpu >= 0) return static_cast<unsigned>(cpu);
#if defined(__linux__)
  const int c = sched_getcpu();
  if (c >= 0) return static_cast<unsigned>(c);
#endif
  return detail::thread_hash();
}

// True if the calling thread has a registered rseq area and the rseq fast path is
// compiled in (x86-64 Linux, no sanitizer).
inline bool rseq_available() noexcept {
  return HOTPATH_RSEQ && detail::rseq_cpu_id() >= 0;
}

// Turn the rseq fast path of per-cpu counters off (or back on) for the calling
// thread only; its updates then take the portable path (a relaxed atomic add).
// For tests and measurements; mixing both paths on one counter is safe.
inline void set_rseq_fast_path(bool enabled) noexcept {
#if HOTPATH_RSEQ
  detail::enable_rseq(enabled);
#else
  (void)enabled;
#endif
}

// True if the calling thread's per-cpu counter updates take the rseq fast path.
inline bool rseq_fast_path() noexcept {
#if HOTPATH_RSEQ
  return rseq_available() && detail::rseq_enabled();
#else
  return false;
#endif
}

// One T per possible cpu, each on its own cache line(s).
template <class T>
class percpu {
  // At least a cache line; more if T asks for more (alignas may not weaken it).
  struct alignas(alignof(T) > cache_line_size ? alignof(T) : cache_line_size) cell {
    T value;
  };
  static_assert(sizeof(cell) % cache_line_size == 0);

 public:
  using value_type = T;
  // Distance between consecutive slots, in bytes: a multiple of the cache line.
  static constexpr std::size_t stride = sizeof(cell);

  template <bool Const>
  class basic_iterator {
    using cell_ptr = std::conditional_t<Const, const cell*, cell*>;

   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using reference = std::conditional_t<Const, const T&, T&>;
    using pointer = std::conditional_t<Const, const T*, T*>;

    basic_iterator() = default;
    explicit basic_iterator(cell_ptr cp) noexcept : c_(cp) {}
    reference operator*() const noexcept { return c_->value; }
    pointer operator->() const noexcept { return &c_->value; }
    basic_iterator& operator++() noexcept {
      ++c_;
      return *this;
    }
    basic_iterator operator++(int) noexcept {
      auto old = *this;
      ++c_;
      return old;
    }
    friend bool operator==(basic_iterator a, basic_iterator b) noexcept { return a.c_ == b.c_; }

   private:
    cell_ptr c_ = nullptr;
  };
  using iterator = basic_iterator<false>;
  using const_iterator = basic_iterator<true>;

  // Every slot value-initialised.
  percpu() : n_(possible_cpus()), cells_(new cell[n_]()) {}
  // Every slot a copy of `init`.
  explicit percpu(const T& init) : n_(possible_cpus()), cells_(new cell[n_]{}) {
    for (auto& v : *this)
      v = init;
  }
  percpu(const percpu&) = delete;
  percpu& operator=(const percpu&) = delete;

  // The number of slots: possible_cpus().
  std::size_t size() const noexcept { return n_; }

  // The calling cpu's slot (see the header comment: a hint, not exclusive).
  T& local() noexcept { return cells_[index(current_cpu())].value; }
  const T& local() const noexcept { return cells_[index(current_cpu())].value; }

  // Slot of `cpu`; precondition cpu < size().
  T& operator[](std::size_t cpu) noexcept {
    HOTPATH_ASSERT(cpu < n_, "percpu: cpu out of range");
    return cells_[cpu].value;
  }
  const T& operator[](std::size_t cpu) const noexcept {
    HOTPATH_ASSERT(cpu < n_, "percpu: cpu out of range");
    return cells_[cpu].value;
  }

  // Slot 0; slot i is at byte offset i * stride from it.
  T* data() noexcept { return &cells_[0].value; }

  iterator begin() noexcept { return iterator(cells_.get()); }
  iterator end() noexcept { return iterator(cells_.get() + n_); }
  const_iterator begin() const noexcept { return const_iterator(cells_.get()); }
  const_iterator end() const noexcept { return const_iterator(cells_.get() + n_); }

  // The slot index that cpu number `cpu` maps to (cpu itself, unless the number
  // came from the thread hash or a cpu the possible set did not list).
  std::size_t index(unsigned cpu) const noexcept { return cpu < n_ ? cpu : cpu % n_; }

 private:
  std::size_t n_;
  std::unique_ptr<cell[]> cells_;
};

}  // namespace hotpath
HOTPATH_VISIBILITY_END
