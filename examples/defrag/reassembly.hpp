// SPDX-License-Identifier: MIT
// One datagram being reassembled: its fragments, the overlap policy, and the packet
// a host would deliver once it is complete. Not thread-safe: the engine holds the
// datagram's bucket lock around every call.
//
// Storage: no payload byte is copied until the datagram is complete. Per fragment kept,
// the datagram records where its bytes are (a piece_source in a small inline vector):
// in the caller's packet when the caller lends it for the datagram's life (the
// engine's input_borrowed(), e.g. a capture held in memory, as a NIC driver holds its
// receive buffers), else in a copy of the packet in a pooled block. build() then
// copies header and payload once, into the buffer that is delivered.
//
// Policies (docs/defrag.md has the table):
//   linux         Linux >= 4.19 (inet_frag_queue_insert): fragments are kept as runs;
//                 one lying wholly inside a run is a duplicate and dropped, any other
//                 overlap kills the datagram (RFC 5722, ReasmOverlaps).
//   the others    target-based (Novak/Sturges): the overlap is resolved per stored
//                 piece P (its current extent) against the new fragment N:
//     first         P wins              last          N wins
//     bsd           P wins iff P.s <= N.s              linux-legacy  P wins iff P.s < N.s
//     bsd-right     N wins iff P.e < N.e, or P.e == N.e and P.s >= N.s (Snort frag3)
//     windows       N wins iff N.s < P.s and N.e > P.e
//     solaris       N wins iff N.s < P.s and N.e >= P.e
// Every policy applies Linux's length rules first (a last fragment that disagrees
// with what was received kills the datagram; a non-last fragment's end is rounded
// down to 8 for IPv4 and dropped for IPv6; a zero-length fragment kills it).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "packet.hpp"

// GNU dialects (-std=gnu++20, CMake's default) predefine `linux` as 1; the portable
// spelling is __linux__. Without this, `policy::linux` would not compile there.
#ifdef linux
#undef linux
#endif

namespace defrag {

// How overlapping fragments are resolved. `linux` is Linux 6.x (RFC 5722: a partial
// overlap kills the datagram); the others are the target-based policies of
// Novak/Sturges, "Target-Based Fragmentation Reassembly" (2005).
enum class policy { linux, first, last, bsd, bsd_right, linux_legacy, windows, solaris };

inline constexpr std::array<std::string_view, 8> policy_names = {
    "linux", "first", "last", "bsd", "bsd-right", "linux-legacy", "windows", "solaris"};

inline std::string_view name(policy p) {
  return policy_names[static_cast<std::size_t>(p)];
}

// Accepts the names above; '_' may stand for '-'.
inline std::optional<policy> parse_policy(std::string_view s) {
  for (std::size_t i = 0; i < policy_names.size(); ++i) {
    std::string_view n = policy_names[i];
    if (n.size() != s.size()) continue;
    bool same = true;
    for (std::size_t j = 0; j < n.size() && same; ++j)
      same = n[j] == s[j] || (n[j] == '-' && s[j] == '_');
    if (same) return static_cast<policy>(i);
  }
  return std::nullopt;
}

// A vector of trivially copyable T holding N inline, on the heap beyond.
template <class T, std::size_t N>
class small_vector {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  small_vector() = default;
  small_vector(const small_vector& o) { *this = o; }
  small_vector& operator=(const small_vector& o) {
    if (this != &o) {
      clear();
      reserve(o.size_);
      std::memcpy(data(), o.data(), o.size_ * sizeof(T));
      size_ = o.size_;
    }
    return *this;
  }
  small_vector(small_vector&& o) noexcept { steal(o); }
  small_vector& operator=(small_vector&& o) noexcept {
    if (this != &o) {
      release();
      steal(o);
    }
    return *this;
  }
  ~small_vector() { release(); }

  T* data() noexcept { return heap_ ? heap_ : inline_; }
  const T* data() const noexcept { return heap_ ? heap_ : inline_; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  T& operator[](std::size_t i) noexcept { return data()[i]; }
  const T& operator[](std::size_t i) const noexcept { return data()[i]; }
  T* begin() noexcept { return data(); }
  T* end() noexcept { return data() + size_; }
  const T* begin() const noexcept { return data(); }
  const T* end() const noexcept { return data() + size_; }
  T& back() noexcept { return data()[size_ - 1]; }
  void clear() noexcept { size_ = 0; }

  void reserve(std::size_t n) {
    if (n <= capacity()) return;
    std::size_t cap = std::max(n, 2 * capacity());
    T* p = static_cast<T*>(::operator new(cap * sizeof(T)));
    std::memcpy(p, data(), size_ * sizeof(T));
    if (heap_) ::operator delete(heap_);
    heap_ = p;
    cap_ = cap;
  }
  void push_back(const T& v) {
    reserve(size_ + 1);
    data()[size_++] = v;
  }
  void insert(std::size_t pos, const T& v) {
    reserve(size_ + 1);
    T* d = data();
    std::memmove(d + pos + 1, d + pos, (size_ - pos) * sizeof(T));
    d[pos] = v;
    ++size_;
  }
  // Replaces [first, last) by the n elements at src (which must not alias this).
  void replace(std::size_t first, std::size_t last, const T* src, std::size_t n) {
    const std::size_t tail = size_ - last;
    reserve(size_ - (last - first) + n);
    T* d = data();
    std::memmove(d + first + n, d + last, tail * sizeof(T));
    std::memcpy(d + first, src, n * sizeof(T));
    size_ = first + n + tail;
  }

 private:
  std::size_t capacity() const noexcept { return heap_ ? cap_ : N; }
  void release() noexcept {
    if (heap_) ::operator delete(heap_);
    heap_ = nullptr;
    size_ = 0;
  }
  void steal(small_vector& o) noexcept {
    size_ = o.size_;
    if (o.heap_) {
      heap_ = o.heap_;
      cap_ = o.cap_;
      o.heap_ = nullptr;
    } else {
      heap_ = nullptr;
      std::memcpy(inline_, o.inline_, size_ * sizeof(T));
    }
    o.size_ = 0;
  }

  T* heap_ = nullptr;
  std::size_t size_ = 0;
  std::size_t cap_ = 0;
  T inline_[N];
};

// Payload buffers come in power-of-two sizes from 2 KiB to 128 KiB and are recycled
// through a small per-thread cache: under a flood every bogus datagram takes one and
// an eviction gives one back, and a recycled buffer is still in cache when the next
// fragment is copied into it (malloc would hand out cold memory, and glibc trims and
// refaults the top of its heap). Bounded: at most cache_bytes per thread.
class buffer_pool {
 public:
  static constexpr unsigned min_shift = 11, max_shift = 17;
  static constexpr std::size_t cache_bytes = std::size_t{1} << 20;

  static std::size_t size_class(std::size_t n) noexcept {
    return n <= (std::size_t{1} << min_shift) ? min_shift : std::bit_width(n - 1);
  }
  static std::uint8_t* take(unsigned shift) {
    if (shift <= max_shift) {
      list& l = local().lists[shift - min_shift];
      if (l.n > 0) {
        local().bytes -= std::size_t{1} << shift;
        return l.items[--l.n];
      }
    }
    // operator new, not malloc: a program that replaces it (an allocator, a test
    // failing allocations on purpose) sees these too.
    return static_cast<std::uint8_t*>(::operator new (std::size_t{1} << shift));
  }
  static void give(std::uint8_t* p, unsigned shift) noexcept {
    if (!p) return;
    if (shift <= max_shift) {
      pool& c = local();
      list& l = c.lists[shift - min_shift];
      if (l.n < list::cap && c.bytes + (std::size_t{1} << shift) <= cache_bytes) {
        l.items[l.n++] = p;
        c.bytes += std::size_t{1} << shift;
        return;
      }
    }
    ::operator delete(p);
  }

 private:
  struct list {
    static constexpr std::size_t cap = 64;
    std::uint8_t* items[cap];
    std::size_t n = 0;
  };
  struct pool {
    list lists[max_shift - min_shift + 1];
    std::size_t bytes = 0;
    ~pool() {
      for (list& l : lists)
        while (l.n > 0)
          ::operator delete(l.items[--l.n]);
    }
  };
  static pool& local() noexcept {
    thread_local pool p;
    return p;
  }
};

// A byte buffer of a power-of-two capacity from buffer_pool.
class byte_buffer {
 public:
  byte_buffer() = default;
  byte_buffer(const byte_buffer&) = delete;
  byte_buffer& operator=(const byte_buffer&) = delete;
  byte_buffer(byte_buffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), shift_(std::exchange(o.shift_, 0)) {}
  byte_buffer& operator=(byte_buffer&& o) noexcept {
    if (this != &o) {
      buffer_pool::give(p_, shift_);
      p_ = std::exchange(o.p_, nullptr);
      shift_ = std::exchange(o.shift_, 0);
    }
    return *this;
  }
  ~byte_buffer() { buffer_pool::give(p_, shift_); }

  std::uint8_t* data() noexcept { return p_; }
  const std::uint8_t* data() const noexcept { return p_; }
  std::size_t capacity() const noexcept { return p_ ? std::size_t{1} << shift_ : 0; }
  // Keeps the first `keep` bytes; new bytes are uninitialised.
  void grow(std::size_t n, std::size_t keep) {
    if (n <= capacity()) return;
    const auto shift = static_cast<unsigned>(buffer_pool::size_class(n));
    std::uint8_t* q = buffer_pool::take(shift);
    if (p_) std::memcpy(q, p_, std::min(keep, capacity()));
    buffer_pool::give(p_, shift_);
    p_ = q;
    shift_ = shift;
  }

 private:
  std::uint8_t* p_ = nullptr;
  unsigned shift_ = 0;
};

struct interval {
  std::uint32_t start;
  std::uint32_t end;
};

// What happened to one fragment.
enum class outcome : std::uint8_t {
  queued,     // kept; the datagram is not complete
  complete,   // kept, and the datagram is complete: call build()
  duplicate,  // dropped: adds nothing to what was received; the datagram lives on
  dropped,    // dropped for `why`; the datagram lives on
  killed,     // the datagram is dead (discard it) for `why`
};
enum class why : std::uint8_t {
  none,
  overlap,             // partial overlap under the linux policy
  odd_length,          // non-last fragment not a multiple of 8 (IPv6; IPv4 is trimmed)
  too_long,            // datagram end beyond 65535
  too_many_fragments,  // more than max_fragments
  bad_length,          // a last fragment that disagrees with the data, or data past it
  zero_length,         // a fragment with no payload (after trimming)
  bad_ecn,             // ECN codepoints that cannot be combined (RFC 3168)
};
struct add_result {
  outcome what = outcome::queued;
  why reason = why::none;
  bool trimmed = false;     // IPv4 non-last fragment rounded down to a multiple of 8
  bool overlapped = false;  // a target-based policy resolved an overlap
};

// ip_frag_ecn_table (net/ipv4/inet_fragment.c): index = OR of 1 << (ECN bits) over
// the fragments; 0xff = invalid mix, else the ECN bits the datagram gets.
inline std::uint8_t combined_ecn(std::uint8_t mask) noexcept {
  const bool not_ect = mask & 1, ce = mask & 8;
  if (not_ect) return mask == 1 ? 0 : 0xff;
  return ce ? 3 : 0;
}

// An IPv6 atomic fragment (offset 0, M = 0; RFC 6946) rebuilt as the datagram it
// stands for: fragment header removed, payload length and next header fixed.
inline byte_buffer strip_atomic_fragment(const packet_info& pi, std::span<const std::uint8_t> ip,
                                         std::span<const std::uint8_t>& pkt) {
  const std::uint32_t len = pi.length - 8;
  byte_buffer b;
  b.grow(len, 0);
  std::uint8_t* h = b.data();
  std::memcpy(h, ip.data(), pi.header_len);
  std::memcpy(h + pi.header_len, ip.data() + pi.payload_off, pi.length - pi.payload_off);
  store_be16(h + 4, static_cast<std::uint16_t>(len - 40));
  h[pi.prev_nexthdr_off] = pi.frag_nexthdr;
  pkt = {h, len};
  return b;
}

// Where the bytes of a payload range come from: bytes [start, end) are at src.
struct piece_source {
  std::uint32_t start;
  std::uint32_t end;
  const std::uint8_t* src;
};

// A datagram handed out without copying it: its header (rebuilt, in storage of the
// view's own) and then its payload as pieces in offset order, pointing into the
// fragments the datagram kept, as DPDK hands out a chain of mbufs. Valid only while
// the engine's out() call that received it runs. Also wraps a contiguous packet
// (header() is then the whole packet and there are no pieces).
class datagram_view {
 public:
  datagram_view() = default;
  explicit datagram_view(std::span<const std::uint8_t> pkt) noexcept : header_(pkt) {}
  datagram_view(const datagram_view&) = delete;
  datagram_view& operator=(const datagram_view&) = delete;

  std::size_t size() const noexcept { return header_.size() + payload_len_; }
  std::span<const std::uint8_t> header() const noexcept { return header_; }
  // Calls f(std::span<const std::uint8_t>) for the header, then for every piece, in order.
  template <class F>
  void for_each_span(F&& f) const {
    f(header_);
    for (const piece_source& p : pieces_)
      f(std::span<const std::uint8_t>(p.src, std::min(p.end, payload_len_) - p.start));
  }
  // Writes the packet, contiguous, to dst (size() bytes).
  void copy_to(std::uint8_t* dst) const noexcept {
    for_each_span([&](std::span<const std::uint8_t> s) {
      if (!s.empty()) std::memcpy(dst, s.data(), s.size());
      dst += s.size();
    });
  }

 private:
  friend class datagram;
  std::span<const std::uint8_t> header_;
  std::span<const piece_source> pieces_;  // cover [0, payload_len_) exactly, sorted
  std::uint32_t payload_len_ = 0;
  std::array<std::uint8_t, 128> small_;  // the rebuilt header when it fits (written first)
  byte_buffer large_;                    // else
};

class datagram {
 public:
  static constexpr std::uint32_t max_ip_len = 65535;

  // Adds one fragment (parsed into `pi`, the packet is `ip`). Borrowed: the datagram
  // keeps pointers into `ip`, whose bytes must stay valid and unchanged as long as the
  // datagram lives; else it copies the packet into a block of its own (one per
  // fragment kept). Either way no payload byte moves until build().
  add_result add(const packet_info& pi, std::span<const std::uint8_t> ip, policy pol,
                 std::uint32_t max_fragments, bool borrowed) {
    add_result r;
    const std::uint32_t off = pi.offset;
    std::uint32_t end = off + pi.payload_len();
    // linux keeps every accepted fragment; the others bound their pieces (below).
    if (pol == policy::linux && nfrags_ >= max_fragments)
      return {outcome::dropped, why::too_many_fragments};
    if (pi.family == 6 && end > max_ip_len) return {outcome::dropped, why::too_long};
    // Length rules of ip_frag_queue / ip6_frag_queue. They change len_ and last_in_
    // first, as the kernel does; a fragment not taken for want of memory, or past the
    // piece bound, puts them back (below): as if it never came.
    const std::uint32_t len_was = len_;
    const bool last_was = last_in_;
    auto forget = [&] {
      len_ = len_was;
      last_in_ = last_was;
    };
    if (!pi.more) {
      if (end < len_ || (last_in_ && end != len_)) return {outcome::killed, why::bad_length};
      last_in_ = true;
      len_ = end;
    } else {
      if (end & 7) {
        if (pi.family == 6) return {outcome::dropped, why::odd_length};
        end &= ~7u;
        r.trimmed = true;
      }
      if (end > len_) {
        if (last_in_) return {outcome::killed, why::bad_length};
        len_ = end;
      }
    }
    if (end == off) return {outcome::killed, why::zero_length};

    // Allocations before the pieces change (the copy, writes_'s room, iv_'s growth,
    // each the first change it makes), so that one failing leaves the pieces as they
    // were; the copy is given back if the fragment is not kept.
    block_holder copy;
    const std::uint8_t* base = ip.data();
    const std::uint8_t* data = nullptr;
    bool first_wins = false;
    interval survivors[2 * kMaxSurvivors];  // target-based: the parts the fragment wins
    std::size_t n = 0;
    try {
      if (!borrowed) base = copy.fill(ip.first(pi.length));
      data = base + pi.payload_off;
      if (pol == policy::linux) {
        writes_.reserve(writes_.size() + 1);
        outcome o = insert_linux(off, end);
        if (o != outcome::queued) return {o, o == outcome::killed ? why::overlap : why::none};
      } else if (!insert_target(pol, off, end, survivors, n, r.overlapped, max_fragments)) {
        forget();
        return {outcome::dropped, why::too_many_fragments};
      }
    } catch (...) {
      forget();
      throw;
    }
    if (pol == policy::linux) {
      writes_.push_back({off, end, data});  // room reserved above
      meat_ += end - off;
      first_wins = off == 0;
    } else {
      if (n == 0) return {outcome::duplicate, why::none};
      // Applied in arrival order by build(): a later fragment's survivors overwrite
      // what it won from earlier ones.
      // A resolved overlap leaves pieces whose bytes later pieces overwrite.
      if (r.overlapped) disjoint_ = false;
      for (std::size_t i = 0; i < n; ++i)
        writes_.push_back(
            {survivors[i].start, survivors[i].end, data + (survivors[i].start - off)});
      first_wins = survivors[0].start == 0;
    }
    copy.keep(blocks_);
    ++nfrags_;
    ecn_mask_ |= static_cast<std::uint8_t>(1u << pi.ecn);
    const std::uint32_t fragsize = end - off + pi.header_len;
    max_size_ = std::max(max_size_, fragsize);
    if (pi.dont_fragment) max_df_size_ = std::max(max_df_size_, fragsize);
    if (first_wins) take_header(pi, base);
    if (first_in_ && last_in_ && meat_ == len_) {
      r.what = outcome::complete;
      if (too_long()) return {outcome::killed, why::too_long};
      if (combined_ecn(ecn_mask_) == 0xff) return {outcome::killed, why::bad_ecn};
    }
    return r;
  }

  // The datagram as the host delivers it, written into a buffer of its own: the one
  // copy of its bytes. `pkt` stays valid as long as the returned buffer lives. Call
  // after add() returned complete (the datagram may have been moved since).
  byte_buffer build(std::span<const std::uint8_t>& pkt) const {
    const std::uint32_t total = hlen_ + len_;
    byte_buffer b;
    b.grow(total, 0);
    std::uint8_t* h = b.data();
    std::memcpy(h, hdr_, hlen_);
    std::uint8_t* payload = h + hlen_;
    for (const piece_source& w : writes_)
      std::memcpy(payload + w.start, w.src, std::min(w.end, len_) - w.start);
    fix_header(h);
    pkt = {h, total};
    return b;
  }

  // The same datagram as build() makes, without copying its payload: fills v (valid as
  // long as this datagram lives unchanged) and returns true, or returns false when its
  // pieces overlap (a target-based policy resolved an overlap: build() applies them in
  // arrival order). Call after add() returned complete.
  bool view(datagram_view& v) {
    if (!disjoint_) return false;
    // Pieces arrive in any order; sort them by offset (they are disjoint and cover the
    // payload exactly: meat_ == len_). Usually sorted already.
    auto by_start = [](const piece_source& a, const piece_source& b) { return a.start < b.start; };
    if (!std::is_sorted(writes_.begin(), writes_.end(), by_start))
      std::sort(writes_.begin(), writes_.end(), by_start);
    std::uint8_t* h = v.small_.data();
    if (hlen_ > v.small_.size()) {
      v.large_.grow(hlen_, 0);
      h = v.large_.data();
    }
    std::memcpy(h, hdr_, hlen_);
    fix_header(h);
    v.header_ = {h, hlen_};
    v.pieces_ = {writes_.data(), writes_.size()};
    v.payload_len_ = len_;
    return true;
  }

  // The IPv6 next header of the payload: what follows the rebuilt header.
  std::uint8_t payload_nexthdr() const noexcept { return frag_nexthdr_; }
  std::uint8_t family() const noexcept { return family_; }
  // Bytes of the rebuilt header (IPv6: up to where the fragment header was).
  std::uint32_t header_len() const noexcept { return hlen_; }

  std::uint32_t fragments() const noexcept { return nfrags_; }
  std::uint32_t known_length() const noexcept { return len_; }
  std::size_t intervals() const noexcept { return iv_.size(); }

 private:
  static constexpr std::size_t kMaxSurvivors = 64;

  // Rewrites the first fragment's header at h as the reassembled datagram's.
  void fix_header(std::uint8_t* h) const noexcept {
    const std::uint32_t total = hlen_ + len_;
    const std::uint8_t ecn = combined_ecn(ecn_mask_);
    if (family_ == 4) {
      store_be16(h + 2, static_cast<std::uint16_t>(total));
      // Linux sets DF only if the largest fragment carried it (ip_frag_reasm).
      store_be16(h + 6, max_df_size_ == max_size_ ? 0x4000 : 0);
      h[1] |= ecn;
      store_be16(h + 10, 0);
      store_be16(h + 10, checksum_fold(checksum_add({h, hlen_})));
    } else {
      store_be16(h + 4, static_cast<std::uint16_t>(total - 40));
      h[prev_nexthdr_off_] = frag_nexthdr_;
      h[1] |= static_cast<std::uint8_t>(ecn << 4);
    }
  }

  // A copied packet: a buffer from buffer_pool whose first bytes link it into the
  // datagram's list of blocks, the packet after them.
  struct block_header {
    std::uint8_t* next;
    unsigned shift;
  };
  static constexpr std::size_t block_data = 16;
  static_assert(sizeof(block_header) <= block_data);

  // Gives back every block of a list linked through block_header.
  struct block_list_deleter {
    void operator()(std::uint8_t* p) const noexcept {
      while (p) {
        block_header h;
        std::memcpy(&h, p, sizeof h);
        buffer_pool::give(p, h.shift);
        p = h.next;
      }
    }
  };
  using block_list = std::unique_ptr<std::uint8_t, block_list_deleter>;

  class block_holder {
   public:
    block_holder() = default;
    block_holder(const block_holder&) = delete;
    block_holder& operator=(const block_holder&) = delete;
    ~block_holder() {
      if (p_) buffer_pool::give(p_, shift_);
    }
    const std::uint8_t* fill(std::span<const std::uint8_t> pkt) {
      shift_ = static_cast<unsigned>(buffer_pool::size_class(block_data + pkt.size()));
      p_ = buffer_pool::take(shift_);
      std::memcpy(p_ + block_data, pkt.data(), pkt.size());
      return p_ + block_data;
    }
    // Links the block (if any) at the front of `list`; the datagram owns it now.
    void keep(block_list& list) noexcept {
      if (!p_) return;
      block_header h{list.release(), shift_};
      std::memcpy(p_, &h, sizeof h);
      list.reset(std::exchange(p_, nullptr));
    }

   private:
    std::uint8_t* p_ = nullptr;
    unsigned shift_ = 0;
  };

  bool too_long() const noexcept {
    return family_ == 4 ? hlen_ + len_ > max_ip_len : hlen_ - 40 + len_ > max_ip_len;
  }

  // inet_frag_queue_insert(): iv_ holds the runs (fragments appended exactly at the
  // tail extend the last run; any other fragment starts a run of its own).
  outcome insert_linux(std::uint32_t off, std::uint32_t end) {
    if (iv_.empty()) {
      iv_.push_back({off, end});
      return outcome::queued;
    }
    interval& last = iv_.back();
    if (last.end < end) {  // the common case: at the tail
      if (off < last.end) return outcome::killed;
      if (off == last.end)
        last.end = end;
      else
        iv_.push_back({off, end});
      return outcome::queued;
    }
    // Binary search for the first run ending after off.
    auto it = std::upper_bound(iv_.begin(), iv_.end(), off,
                               [](std::uint32_t o, const interval& r) { return o < r.end; });
    if (it != iv_.end() && it->start < end) {
      return off >= it->start && end <= it->end ? outcome::duplicate : outcome::killed;
    }
    iv_.insert(static_cast<std::size_t>(it - iv_.begin()), {off, end});
    return outcome::queued;
  }

  // Does the new fragment n win the bytes it shares with the stored piece p?
  static bool new_wins(policy pol, interval p, interval n) noexcept {
    switch (pol) {
      case policy::first:
        return false;
      case policy::last:
        return true;
      case policy::bsd:
        return p.start > n.start;
      case policy::linux_legacy:
        return p.start >= n.start;
      case policy::bsd_right:
        return p.end < n.end || (p.end == n.end && p.start >= n.start);
      case policy::windows:
        return n.start < p.start && n.end > p.end;
      case policy::solaris:
        return n.start < p.start && n.end >= p.end;
      case policy::linux:
        break;
    }
    return false;
  }

  // Target-based insert: iv_ holds disjoint pieces sorted by start. Writes the parts
  // of [off, end) that the new fragment wins to `surv`. False if the piece list
  // would grow past its bound (nothing changed then).
  bool insert_target(policy pol, std::uint32_t off, std::uint32_t end, interval* surv,
                     std::size_t& nsurv, bool& overlapped, std::uint32_t max_fragments) {
    const interval n{off, end};
    auto first = std::upper_bound(iv_.begin(), iv_.end(), off,
                                  [](std::uint32_t o, const interval& r) { return o < r.end; });
    auto last = first;
    while (last != iv_.end() && last->start < end)
      ++last;
    // New pieces replacing [first, last): remainders of pieces n beats, pieces that
    // beat n, and the survivors of n, all in order of start.
    interval repl[4 * kMaxSurvivors + 4];
    std::size_t nrepl = 0;
    std::uint32_t cursor = off, shared = 0;
    nsurv = 0;
    auto emit_survivor = [&](std::uint32_t s, std::uint32_t e) {
      surv[nsurv++] = {s, e};
      repl[nrepl++] = {s, e};
    };
    if (last - first > static_cast<std::ptrdiff_t>(kMaxSurvivors)) return false;
    for (auto it = first; it != last; ++it) {
      const interval p = *it;
      shared += std::min(p.end, end) - std::max(p.start, off);
      if (new_wins(pol, p, n)) {
        if (p.start < off) repl[nrepl++] = {p.start, off};
        // n's bytes over p are emitted with the next survivor run (cursor stays).
        if (p.end > end) {
          if (cursor < end) emit_survivor(cursor, end);
          cursor = end;
          repl[nrepl++] = {end, p.end};
        }
      } else {
        if (cursor < p.start) emit_survivor(cursor, p.start);
        repl[nrepl++] = p;
        cursor = std::max(cursor, p.end);
      }
    }
    if (cursor < end) emit_survivor(cursor, end);
    // repl is in order: only the first piece can start left of off, and a right
    // remainder (only the last piece can reach past end) follows n's final survivor.
    overlapped = shared > 0;
    if (nsurv == 0) return true;
    const std::size_t removed = static_cast<std::size_t>(last - first);
    if (iv_.size() - removed + nrepl > max_fragments) {
      nsurv = 0;
      return false;
    }
    writes_.reserve(writes_.size() + nsurv);  // so that add() cannot throw past here
    iv_.replace(static_cast<std::size_t>(first - iv_.begin()),
                static_cast<std::size_t>(last - iv_.begin()), repl, nrepl);
    meat_ += (end - off) - shared;
    return true;
  }

  // The header of the fragment at offset 0 becomes the datagram's.
  void take_header(const packet_info& pi, const std::uint8_t* ip) noexcept {
    hdr_ = ip;
    hlen_ = pi.header_len;
    family_ = pi.family;
    prev_nexthdr_off_ = pi.prev_nexthdr_off;
    frag_nexthdr_ = pi.frag_nexthdr;
    first_in_ = true;
  }

  small_vector<interval, 6> iv_;
  small_vector<piece_source, 8> writes_;  // in arrival order
  block_list blocks_;                     // copied packets, linked through block_header
  const std::uint8_t* hdr_ = nullptr;     // the IP header of the fragment at offset 0
  std::uint32_t len_ = 0;                 // end of the datagram's payload as far as known (q.len)
  std::uint32_t meat_ = 0;                // payload bytes received, without overlaps
  std::uint32_t nfrags_ = 0;
  std::uint32_t hlen_ = 0;
  std::uint32_t max_size_ = 0, max_df_size_ = 0;
  std::uint32_t prev_nexthdr_off_ = 0;
  std::uint8_t frag_nexthdr_ = 0;
  std::uint8_t family_ = 0;
  std::uint8_t ecn_mask_ = 0;
  bool first_in_ = false;
  bool last_in_ = false;
  bool disjoint_ = true;  // writes_ do not overlap (always so under linux)
};

}  // namespace defrag
