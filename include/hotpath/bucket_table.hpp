// SPDX-License-Identifier: MIT
// bucket_table: a hash table of short-lived keyed state (reassembly queues,
// connection trackers, handshakes) found by many threads at once, bounded in memory,
// and built to survive floods of keys that never complete.
//
//   - one lock per bucket (queued_lock by default) and chained nodes, one per entry;
//     no global lock or list on any path; a lookup of an absent key allocates nothing
//   - every entry carries a charge in bytes (the kernel's truesize), taken from
//     the budget: from the calling cpu's reserve, refilled a batch at a time from
//     one shared pool, so charging touches no shared line until the table is near
//     its budget, and the charges never exceed the budget, at any thread count
//   - a deadline in the caller's clock (any int64: ns of capture time replays
//     offline); expired entries go lazily when their bucket is visited, and sweep()
//     visits a bounded number of buckets per call (locking only those where
//     something may be due)
//   - over budget, a charge evicts instead of refusing: it samples a few random
//     buckets and removes what has expired there, else the least recently touched
//     entry seen (approximate LRU, O(1) buckets per charge, no global list)
//
// Example (a reassembly table; times are capture times in ns):
//
//   struct queue { std::vector<fragment> frags; };
//   hotpath::bucket_table_options o;
//   o.budget = 4 << 20;                    // bytes, like ipfrag_high_thresh
//   o.ttl = 30'000'000'000;                // a new entry's deadline is now + ttl
//   hotpath::bucket_table<flow_key, queue> t(o, {.on_expire = [&](auto&) { ++timeouts; }});
//
//   auto r = t.find_or_create(key, now, [&](auto& e) {
//     if (!e.charge(frag.truesize)) return status::refused;  // budget, even after evicting
//     e.value().frags.push_back(std::move(frag));
//     if (complete(e.value())) { deliver(e.value()); e.erase(); return status::done; }
//     return status::queued;
//   });
//   if (!r) ...  // no room for a new entry: counted, fragment dropped
//   t.sweep(now, 64);                      // now and then, from any thread
//
// Visiting. find_or_create(key, now, f, args...) finds the entry for key (creating
// it from args... if absent or expired) and calls f(entry&) under the bucket lock;
// visit(key, now, f) does the same only if the key is present and not expired. Both
// return what f returns, wrapped in std::optional (bool when f returns void): empty
// when f was not called (absent key for visit; no room for a new entry for
// find_or_create). Each call touches the entry (last_used = now). f must not call
// into the same table (the bucket lock is held; it is not recursive).
//
// The entry handle: key(), value(), created() (this call made it), charge(delta)
// (add delta bytes to the entry's charge; a positive delta that the budget cannot
// take even after evicting returns false and charges nothing), charged(),
// deadline() / set_deadline(t), last_used() / touch(t), erase() (the entry is
// unlinked when f returns and destroyed after the bucket lock is released).
//
// Events. on_expire and on_evict are called once for every entry that expires (lazy
// or in sweep) or is evicted, with no table lock held, before the entry is destroyed,
// on the thread that removed it (so possibly on several threads at once); they may
// read and move from the entry (they get an entry_view). Entries removed by erase(),
// clear() or the destructor raise no event.
//
// Eviction. Over budget, a charge evicts instead of refusing: it samples a few
// random non-empty buckets (eviction_samples, 8 by default), removes what has
// expired there, else the least recently touched entry among them. So stale entries
// go before fresh ones, and a flood of new keys evicts its own oldest: a live entry
// touched at t is evicted only if every sample holds nothing older (probability at
// most q^8 when a fraction q of the occupied buckets hold only entries fresher than
// t). With shares, a share holding three quarters of its part of the budget evicts
// within itself first.
// detail/table_eviction.hpp states the policy and its guarantees in full.
//
// Budget bound: exact, at any instant and any thread count: the bytes held by linked
// entries never exceed the budget (detail/table_budget.hpp says how). charged() is the
// budget less the pool and the reserves: exact when no charge runs; while charges move
// bytes, it can read high (never above the budget) or low (even negative).
//
// Cost: find_or_create of a present key is a hash (SipHash-1-3, 14 ns here), the bucket
// lock (one CAS, one store) and a short chain walk. The chain is not RCU-protected:
// every access takes the bucket lock, as the kernel's reassembly queue lock is taken
// for every fragment anyway.
//
// Lock and Policy. Lock is the bucket lock (any Lockable with try_lock()). Policy
// gives the atomic template of the bucket heads and hints, the sweep cursor, the
// budget's pool and reserves and the entry count's percpu_counter
// (detail/policy.hpp); default_policy is std::atomic, as percpu_counter's own
// default. A policy that defines current_cpu() picks the reserve a charge uses; one
// that defines random() (its low bits pick a bucket) replaces the per-thread
// generator of eviction sampling. The deterministic scheduler of tests/schedule/
// drives the table through all three.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>

#include "hotpath/detail/config.hpp"
#include "hotpath/detail/policy.hpp"
#include "hotpath/detail/table_budget.hpp"
#include "hotpath/detail/table_sampler.hpp"
#include "hotpath/keyed_hash.hpp"
#include "hotpath/percpu.hpp"
#include "hotpath/percpu_counter.hpp"
#include "hotpath/queued_lock.hpp"

namespace hotpath {

struct bucket_table_options {
  // Fixed for the table's life, rounded up to a power of two.
  std::size_t buckets = 1024;
  // The high threshold in bytes: charged() stays at or below it (the header's opening).
  std::int64_t budget = std::int64_t{4} << 20;
  // A new entry's deadline is now + ttl (saturating); the default never expires.
  std::int64_t ttl = std::numeric_limits<std::int64_t>::max();
  // Non-empty buckets sampled per eviction (k of the guarantee), 1 to 64.
  unsigned eviction_samples = 8;
  // Buckets an eviction may probe to find them; 0: 8 k (at least k, at most 8 per
  // bucket). More where entries may crowd into a part of the buckets while the rest are
  // empty (a hash that gives callers shares of the table): with too few probes, a
  // sample can miss the crowd and find only live entries elsewhere.
  unsigned eviction_probes = 0;
  // Evictions a charge may make before it gives up and refuses.
  unsigned eviction_attempts = 4;
  // Charged when an entry is created; -1: the size of its node (key, value, links).
  std::int64_t entry_charge = -1;
  // Bytes a cpu takes from the shared pool at a time (it keeps at most twice that);
  // 0: budget / (32 x cpus), at least 64.
  std::int64_t charge_batch = 0;
  // Shares of the buckets, 1 to 64 (at most the buckets): share q is the buckets
  // [q B / n, (q + 1) B / n) of the B, for a Hash that places each caller's entries
  // (a worker's, a receive queue's) in a share of its own. A charge for an entry of a
  // share holding at least three quarters of its part of the budget evicts within that
  // share, whose buckets are in its own cpu's cache (detail/table_eviction.hpp, "Shares"). 1:
  // every eviction samples the whole table.
  std::size_t shares = 1;
};

namespace detail {
template <class R>
using visit_result_t = std::conditional_t<std::is_void_v<R>, bool, std::optional<R>>;
}  // namespace detail

template <class Key, class T, class Hash = keyed_hash<Key>, class Lock = queued_lock,
          class Policy = default_policy>
class bucket_table {
  template <class U>
  using atomic = typename Policy::template atomic<U>;
  struct node {
    template <class... Args>
    node(const Key& k, std::uint64_t h, Args&&... args)
        : hash(h), key(k), value(std::forward<Args>(args)...) {}
    node* next = nullptr;
    std::uint64_t hash;
    std::int64_t deadline = 0;
    std::int64_t last_used = 0;
    std::int64_t charged = 0;
    Key key;
    T value;
  };
  // Hints: written only under the bucket's lock, read without it by eviction and
  // sweep(), which check what they pick under the lock. Each is a lower bound of its
  // field over the bucket's entries (raised to the exact minimum when a walk of the
  // whole chain sees them all); INT64_MAX until the first entry. 32 bytes with
  // queued_lock, so two buckets share a line and none straddles one.
  struct alignas(32) bucket {
    Lock lock;
    atomic<node*> head{nullptr};
    atomic<std::int64_t> oldest{std::numeric_limits<std::int64_t>::max()};  // last_used
    atomic<std::int64_t> due{std::numeric_limits<std::int64_t>::max()};     // deadline
  };
  // Nodes unlinked under a bucket lock; their events are raised and they are
  // destroyed once no lock is held (finish()).
  struct reclaim_lists {
    node* expired = nullptr;
    node* evicted = nullptr;
    node* erased = nullptr;
    static void push(node*& list, node* n) noexcept {
      n->next = list;
      list = n;
    }
  };

 public:
  using key_type = Key;
  using mapped_type = T;
  using hasher = Hash;
  using lock_type = Lock;
  using policy_type = Policy;
  // The most eviction_samples can be (a larger option is lowered to it).
  static constexpr unsigned max_eviction_samples = 64;
  // The most shares can be (a larger option is lowered to it).
  static constexpr std::size_t max_shares = 64;

  // What events and for_each() see of an entry.
  class entry_view {
   public:
    const Key& key() const noexcept { return n_->key; }
    T& value() noexcept { return n_->value; }
    const T& value() const noexcept { return n_->value; }
    std::int64_t charged() const noexcept { return n_->charged; }
    std::int64_t deadline() const noexcept { return n_->deadline; }
    std::int64_t last_used() const noexcept { return n_->last_used; }

   protected:
    friend class bucket_table;
    explicit entry_view(node* n) noexcept : n_(n) {}
    node* n_;
  };

  // The handle a visitor gets, valid only during the visit.
  class entry : public entry_view {
   public:
    bool created() const noexcept { return created_; }
    // The `now` of this call.
    std::int64_t now() const noexcept { return now_; }
    // Adds delta bytes to this entry's charge. A positive delta the budget cannot
    // take, even after evicting other entries, is refused: returns false and
    // charges nothing. A delta <= 0 always succeeds.
    bool charge(std::int64_t delta) noexcept {
      // More given back than the entry holds would make bytes out of nothing.
      HOTPATH_ASSERT(delta >= -this->n_->charged, "bucket_table: charge below zero");
      if (!t_->try_charge(delta, b_, this->n_, now_, *rl_)) return false;
      this->n_->charged += delta;
      t_->count_share(this->n_, delta);
      return true;
    }
    void set_deadline(std::int64_t t) noexcept {
      this->n_->deadline = t;
      lower_hint(b_->due, t);
    }
    void touch(std::int64_t t) noexcept {
      this->n_->last_used = t;
      lower_hint(b_->oldest, t);
    }
    // Unlinks the entry when the visitor returns; destroyed after the lock is released.
    void erase() noexcept { erase_ = true; }
    bool erased() const noexcept { return erase_; }

   private:
    friend class bucket_table;
    entry(bucket_table* t, bucket* b, node* n, std::int64_t now, bool created,
          reclaim_lists* rl) noexcept
        : entry_view(n), t_(t), b_(b), rl_(rl), now_(now), created_(created) {}
    bucket_table* t_;
    bucket* b_;
    reclaim_lists* rl_;
    std::int64_t now_;
    bool created_;
    bool erase_ = false;
  };

  using callback = std::function<void(entry_view&)>;
  struct events {
    // ({} initializers: a designated initializer may name just one without warnings.)
    callback on_expire{};  // deadline reached: lazily on lookup, or in sweep()
    callback on_evict{};   // removed to make room under the budget
  };

  explicit bucket_table(const bucket_table_options& opt = {}, events ev = {}, Hash hash = Hash())
      : opt_(opt),
        events_(std::move(ev)),
        hash_(std::move(hash)),
        mask_(std::bit_ceil(opt.buckets < 1 ? std::size_t{1} : opt.buckets) - 1),
        index_bits_(static_cast<unsigned>(std::popcount(mask_))),
        buckets_(new bucket[mask_ + 1]),
        budget_(opt.budget, opt.charge_batch) {
    opt_.shares =
        std::clamp<std::size_t>(opt_.shares, 1, std::min<std::size_t>(max_shares, mask_ + 1));
    if (opt_.shares > 1) {
      shares_.reset(new share[opt_.shares]);
      for (std::size_t q = 0; q < opt_.shares; ++q) {
        shares_[q].lo = q * (mask_ + 1) / opt_.shares;
        shares_[q].size = (q + 1) * (mask_ + 1) / opt_.shares - shares_[q].lo;
      }
    }
    share_floor_ =
        std::max<std::int64_t>(1, opt_.budget / (4 * static_cast<std::int64_t>(opt_.shares)) * 3);
    if (opt_.entry_charge < 0) opt_.entry_charge = static_cast<std::int64_t>(sizeof(node));
    opt_.eviction_samples = std::clamp(opt_.eviction_samples, 1u, max_eviction_samples);
    if (opt_.eviction_probes == 0) opt_.eviction_probes = 8 * opt_.eviction_samples;
    // At least k; at most 8 per bucket (a table holding only the protected entry is
    // probed that often per attempt). (Not std::clamp: 8 per bucket of a one-bucket
    // table is below a k above 8.)
    opt_.eviction_probes = static_cast<unsigned>(std::max<std::size_t>(
        std::min<std::size_t>(opt_.eviction_probes, 8 * (mask_ + 1)), opt_.eviction_samples));
    opt_.charge_batch = budget_.batch();
    // size() reads sum(), never read(): the count need not fold, and folding would
    // bounce the centre's line between cpus every 32 inserts.
    count_.set_batch(std::int64_t{1} << 40);
  }
  bucket_table(const bucket_table&) = delete;
  bucket_table& operator=(const bucket_table&) = delete;
  ~bucket_table() { clear(); }

  // Finds key's entry, or creates it from args... (absent, or expired: the expired
  // one raises on_expire), charging entry_charge; then calls f(entry&) under the
  // bucket lock. Empty result: no room for a new entry (f not called).
  template <class F, class... Args>
  auto find_or_create(const Key& key, std::int64_t now, F&& f, Args&&... args)
      -> detail::visit_result_t<std::invoke_result_t<F&, entry&>> {
    return access<true>(key, now, f, std::forward<Args>(args)...);
  }

  // Calls f(entry&) under the bucket lock if key is present and not expired.
  template <class F>
  auto visit(const Key& key, std::int64_t now, F&& f)
      -> detail::visit_result_t<std::invoke_result_t<F&, entry&>> {
    return access<false>(key, now, f);
  }

  // Removes key's entry (expired or not) without an event. True if it was there.
  bool erase(const Key& key) {
    const std::uint64_t h = hash_(key);
    bucket& b = bucket_for(h);
    node* victim = nullptr;
    {
      std::scoped_lock g(b.lock);
      for (node *prev = nullptr, *n = b.head.load(std::memory_order_relaxed); n;
           prev = n, n = n->next) {
        if (n->hash == h && n->key == key) {
          unlink(b, prev, n);
          victim = n;
          break;
        }
      }
    }
    if (!victim) return false;
    destroy(victim);
    return true;
  }

  // Expires what is due in the next max_buckets buckets (a cursor shared by all
  // callers walks the table round); a bucket whose deadline hint has not come is not
  // locked. Returns the number of entries expired.
  std::size_t sweep(std::int64_t now, std::size_t max_buckets) {
    // Relaxed: the cursor only spreads sweepers over the table.
    const std::size_t start = cursor_.fetch_add(max_buckets, std::memory_order_relaxed);
    std::size_t expired = 0;
    for (std::size_t i = 0; i < max_buckets && i <= mask_; ++i) {
      bucket& b = buckets_[(start + i) & mask_];
      // Relaxed hints: nothing there, or nothing due yet (the lock would find the same).
      if (!b.head.load(std::memory_order_relaxed) || b.due.load(std::memory_order_relaxed) > now)
        continue;
      reclaim_lists rl;
      {
        std::scoped_lock g(b.lock);
        expire_chain(b, now, nullptr, rl);
      }
      expired += finish(rl);
    }
    return expired;
  }

  // Calls f(entry_view&) for every entry, one bucket at a time under its lock (not a
  // snapshot). f must not call into the table.
  template <class F>
  void for_each(F&& f) {
    for (std::size_t i = 0; i <= mask_; ++i) {
      bucket& b = buckets_[i];
      std::scoped_lock g(b.lock);
      for (node* n = b.head.load(std::memory_order_relaxed); n; n = n->next) {
        entry_view v(n);
        f(v);
      }
    }
  }

  // Removes every entry without events.
  void clear() {
    for (std::size_t i = 0; i <= mask_; ++i) {
      bucket& b = buckets_[i];
      node* n = nullptr;
      {
        std::scoped_lock g(b.lock);
        n = b.head.exchange(nullptr, std::memory_order_relaxed);
      }
      while (n) {
        node* next = n->next;
        destroy(n);
        n = next;
      }
    }
  }

  // Bytes charged by live entries: the budget less the pool and the reserves (header
  // comment, "Budget bound"). Exact when no charge runs; never above budget(), by
  // construction, so it cannot show the bound: sum the entries for that.
  std::int64_t charged() const noexcept { return budget_.charged(); }
  // Bytes in the shared pool: neither charged nor held in a cpu's reserve. One load, so a
  // cheap sign of pressure: charged() is at least budget() less this less the reserves.
  std::int64_t pool_bytes() const noexcept { return budget_.pool_bytes(); }
  // Bytes charged by the live entries of share q (options().shares): exact when no
  // charge runs; with one share, charged().
  std::int64_t charged_in_share(std::size_t q) const noexcept {
    if (!shares_) return q == 0 ? charged() : 0;
    return q < opt_.shares ? shares_[q].bytes.load(std::memory_order_relaxed) : 0;
  }
  // Which share bucket i is in.
  std::size_t share_of(std::size_t i) const noexcept {
    // The q with floor(q B / n) <= i < floor((q + 1) B / n), B a power of two.
    return ((i + 1) * opt_.shares - 1) >> index_bits_;
  }
  // Live entries: exact when no insert or removal is in progress.
  std::int64_t size() const noexcept { return count_.sum(); }
  std::int64_t budget() const noexcept { return opt_.budget; }
  std::size_t bucket_count() const noexcept { return mask_ + 1; }
  const bucket_table_options& options() const noexcept { return opt_; }
  const Hash& hash_function() const noexcept { return hash_; }
  // Which bucket a key lands in (tests of the hash's spread).
  std::size_t bucket_index(const Key& key) const noexcept {
    return static_cast<std::size_t>(hash_(key)) & mask_;
  }

 private:
  bucket& bucket_for(std::uint64_t h) noexcept {
    return buckets_[static_cast<std::size_t>(h) & mask_];
  }

  // Holding b's lock.
  static void unlink(bucket& b, node* prev, node* n) noexcept {
    if (prev)
      prev->next = n->next;
    else
      b.head.store(n->next, std::memory_order_relaxed);  // under the lock; peeks are hints
  }

  // Holding b's lock: lowers a hint of b to cover t.
  static void lower_hint(atomic<std::int64_t>& hint, std::int64_t t) noexcept {
    // Relaxed, as every access to a hint: the bucket lock orders the writers, and a
    // reader without the lock checks under the lock what the hint made it choose.
    if (t < hint.load(std::memory_order_relaxed)) hint.store(t, std::memory_order_relaxed);
  }

  // Holding b's lock: sets b's hints to the minima over its chain.
  static void set_hints(bucket& b, std::int64_t oldest, std::int64_t due) noexcept {
    b.oldest.store(oldest, std::memory_order_relaxed);  // relaxed: see lower_hint()
    b.due.store(due, std::memory_order_relaxed);
  }
  static void rehint(bucket& b) noexcept {
    std::int64_t oldest = std::numeric_limits<std::int64_t>::max();
    std::int64_t due = oldest;
    for (node* n = b.head.load(std::memory_order_relaxed); n; n = n->next) {
      oldest = std::min(oldest, n->last_used);
      due = std::min(due, n->deadline);
    }
    set_hints(b, oldest, due);
  }

  // Chain walks that expire what is due on the way (detail/table_eviction.hpp).
  struct chain_walk {
    node* stopped = nullptr;  // the entry stop() chose
    node* lru = nullptr;
    std::int64_t oldest = std::numeric_limits<std::int64_t>::max();
    std::int64_t due = std::numeric_limits<std::int64_t>::max();
  };
  template <class Stop>
  chain_walk walk_chain(bucket& b, std::int64_t now, node* keep, reclaim_lists& rl,
                        std::int64_t* freed, Stop stop);
  node* expire_chain(bucket& b, std::int64_t now, node* keep, reclaim_lists& rl,
                     std::int64_t* freed = nullptr) noexcept;

  // Adds delta to the bytes of n's share (with shares).
  void count_share(const node* n, std::int64_t delta) noexcept {
    if (!shares_ || delta == 0) return;
    // Relaxed: the count only steers sampling (detail/table_eviction.hpp, "Shares").
    shares_[share_of(static_cast<std::size_t>(n->hash) & mask_)].bytes.fetch_add(
        delta, std::memory_order_relaxed);
  }

  void uncharge(node* n, std::int64_t* freed = nullptr) noexcept {
    count_share(n, -n->charged);
    if (freed)
      *freed += n->charged;
    else
      budget_.give_back(n->charged);
    count_.dec();
  }

  // Raises the events of the nodes on rl and destroys them; returns how many expired.
  std::size_t finish(reclaim_lists& rl) {
    std::size_t expired = 0;
    auto drain = [](node*& list, const callback* cb) {
      node* in_order = nullptr;  // the lists are pushed at the front: events in removal order
      while (node* n = list) {
        list = n->next;
        n->next = in_order;
        in_order = n;
      }
      list = in_order;
      std::size_t k = 0;
      while (node* n = list) {
        list = n->next;
        if (cb && *cb) {
          entry_view v(n);
          (*cb)(v);
        }
        delete n;
        ++k;
      }
      return k;
    };
    expired = drain(rl.expired, &events_.on_expire);
    drain(rl.evicted, &events_.on_evict);
    drain(rl.erased, nullptr);
    return expired;
  }

  // Lists are drained even if a visitor throws.
  struct finisher {
    bucket_table* t;
    reclaim_lists rl;
    ~finisher() { t->finish(rl); }
  };

  void destroy(node* n) noexcept {
    uncharge(n);
    delete n;
  }

  using random_indices = detail::sample_indices<Policy>;

  // Eviction (defined and described in detail/table_eviction.hpp).
  bool try_charge(std::int64_t delta, bucket* held, node* protect, std::int64_t now,
                  reclaim_lists& rl) noexcept;

  bool evict(bucket* held, node* protect, std::int64_t now, reclaim_lists& rl,
             std::int64_t& freed_bytes,
             bool within_share) noexcept HOTPATH_NO_THREAD_SAFETY_ANALYSIS;

  template <bool Create, class F, class... Args>
  auto access(const Key& key, std::int64_t now, F& f, Args&&... args)
      -> detail::visit_result_t<std::invoke_result_t<F&, entry&>> {
    using R = std::invoke_result_t<F&, entry&>;
    using result = detail::visit_result_t<R>;
    static_assert(!std::is_reference_v<R>, "bucket_table: a visitor must not return a reference");
    const std::uint64_t h = hash_(key);
    bucket& b = bucket_for(h);
    finisher fin{this, {}};  // destroyed last: events run with no lock held
    std::unique_lock g(b.lock);
    // Look up, expiring what is due on the way; the minima are over the entries
    // passed: when the key is absent, over the whole chain.
    const chain_walk w = walk_chain(b, now, nullptr, fin.rl, nullptr,
                                    [&](const node* n) { return n->hash == h && n->key == key; });
    node* found = w.stopped;
    bool created = false;
    if (!found) {
      if constexpr (!Create) {
        return result{};
      } else {
        if (!try_charge(opt_.entry_charge, &b, nullptr, now, fin.rl)) return result{};
        try {
          found = new node(key, h, std::forward<Args>(args)...);
        } catch (...) {
          budget_.give_back(opt_.entry_charge);
          throw;
        }
        found->charged = opt_.entry_charge;
        count_share(found, found->charged);
        found->deadline = detail::saturating_add(now, opt_.ttl);
        found->next = b.head.load(std::memory_order_relaxed);
        b.head.store(found, std::memory_order_relaxed);  // under the lock
        count_.inc();
        created = true;
        // Exact, or low if the charge evicted here: the chain walked, and the new entry.
        set_hints(b, std::min(w.oldest, now), std::min(w.due, found->deadline));
      }
    }
    found->last_used = now;
    if (!created) lower_hint(b.oldest, now);
    entry e(this, &b, found, now, created, &fin.rl);
    struct unlinker {  // runs after f, also if f throws
      bucket_table* t;
      bucket& b;
      entry& e;
      reclaim_lists& rl;
      ~unlinker() {
        if (!e.erase_) return;
        node* prev = nullptr;
        for (node* n = b.head.load(std::memory_order_relaxed); n != e.n_; n = n->next)
          prev = n;
        bucket_table::unlink(b, prev, e.n_);
        t->uncharge(e.n_);
        reclaim_lists::push(rl.erased, e.n_);
      }
    };
    if constexpr (std::is_void_v<R>) {
      {
        unlinker u{this, b, e, fin.rl};
        f(e);
      }
      return true;
    } else {
      std::optional<R> r;
      {
        unlinker u{this, b, e, fin.rl};
        r.emplace(f(e));
      }
      return r;
    }
  }

  bucket_table_options opt_;
  events events_;
  Hash hash_;
  std::size_t mask_;
  unsigned index_bits_;  // of mask_
  std::unique_ptr<bucket[]> buckets_;
  detail::table_budget<Policy> budget_;
  percpu_counter<std::int64_t, Policy> count_;
  // Per share (shares > 1; else null): its entries' bytes, on a line of its own, and
  // its buckets [lo, lo + size) (fixed: an eviction reads them beside bytes, with no
  // division).
  struct alignas(cache_line_size) share {
    atomic<std::int64_t> bytes{0};
    std::size_t lo = 0;
    std::size_t size = 0;
  };
  std::unique_ptr<share[]> shares_;
  // Three quarters of a share's part of the budget: from it, a share evicts within itself.
  std::int64_t share_floor_ = 0;
  alignas(cache_line_size) atomic<std::size_t> cursor_{0};
};

}  // namespace hotpath

// Eviction, defined out of line.
#include "hotpath/detail/table_eviction.hpp"
