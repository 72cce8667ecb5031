// SPDX-License-Identifier: MIT
// The ring through which a worker hands a fragment to the worker that owns its datagram.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <memory>

namespace defrag::driver::detail {

// A single-producer single-consumer ring of capture indices, from one worker to
// another. The producer publishes its pushes once per batch and the consumer reloads
// what is published only when it has taken all it saw, so the index lines move between
// the cores once per batch, not once per packet.
class handoff_ring {
 public:
  // Room for `want` indices, rounded up to a power of two, at most max_capacity (128
  // KiB: its pages are touched only as far as it fills).
  static constexpr std::uint32_t max_capacity = std::uint32_t{1} << 15;
  explicit handoff_ring(std::size_t want)
      : capacity_(std::bit_ceil(
            static_cast<std::uint32_t>(std::clamp<std::size_t>(want, 1, max_capacity)))),
        slots_(new std::uint32_t[capacity_]) {}
  std::uint32_t capacity() const noexcept { return capacity_; }

  // Producer: false when full.
  bool push(std::uint32_t v) noexcept {
    if (tail_ - head_seen_ == capacity_) {
      // Acquire pairs with the release store in peek(): the slots it freed were read.
      head_seen_ = head_.load(std::memory_order_acquire);
      if (tail_ - head_seen_ == capacity_) return false;
    }
    slots_[tail_ & (capacity_ - 1)] = v;
    ++tail_;
    return true;
  }
  // Producer: makes the pushes so far visible to the consumer.
  void publish() noexcept {
    // Release pairs with the acquire load in peek(): the slots are written.
    if (tail_ != published_seen_)
      published_.store(published_seen_ = tail_, std::memory_order_release);
  }
  // Consumer: the oldest published index, not taken; false if none. On reloading, calls
  // ahead(index) for the first few new ones (prefetching); pop() for each one after.
  template <class Ahead>
  bool peek(std::uint32_t& v, Ahead&& ahead) noexcept {
    if (next_ == end_) {
      // Release pairs with the acquire load in push(): the slots read may be reused.
      if (next_ != freed_) {
        head_.store(freed_ = next_, std::memory_order_release);
        freed_room_ = true;
      }
      // Acquire pairs with the release store in publish().
      end_ = published_.load(std::memory_order_acquire);
      for (std::uint32_t k = next_; k != end_ && k - next_ < prefetch; ++k)
        ahead(slots_[k & (capacity_ - 1)]);
      if (next_ == end_) return false;
    }
    v = slots_[next_ & (capacity_ - 1)];
    return true;
  }
  // Consumer: whether peek() freed room since the last call (its producer may wait for it).
  bool take_freed() noexcept {
    const bool f = freed_room_;
    freed_room_ = false;
    return f;
  }
  // Consumer: takes the index peek() gave.
  template <class Ahead>
  void pop(Ahead&& ahead) noexcept {
    ++next_;
    if (end_ - next_ >= prefetch) ahead(slots_[(next_ + prefetch - 1) & (capacity_ - 1)]);
  }

 private:
  static constexpr std::uint32_t prefetch = 4;
  const std::uint32_t capacity_;
  const std::unique_ptr<std::uint32_t[]> slots_;  // not zeroed: written before read
  // Producer's own line, then the two shared words, then the consumer's own line.
  alignas(64) std::uint32_t tail_ = 0;
  std::uint32_t head_seen_ = 0;
  std::uint32_t published_seen_ = 0;
  alignas(64) std::atomic<std::uint32_t> published_{0};
  alignas(64) std::atomic<std::uint32_t> head_{0};
  alignas(64) std::uint32_t next_ = 0;
  std::uint32_t end_ = 0;    // published, as last loaded
  std::uint32_t freed_ = 0;  // head_, as last stored
  bool freed_room_ = false;
};

}  // namespace defrag::driver::detail
