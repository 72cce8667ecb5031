// SPDX-License-Identifier: MIT
// bucket_table's eviction: what a charge does when the budget has no room left for
// it, and the walk of a chain that expires what is due, shared with lookups and sweep()
// (bucket_table.hpp declares these members; detail/table_budget.hpp keeps the budget itself).
// Included by bucket_table.hpp after the class.
//
// The policy and its guarantee. A positive charge that finds no room in the budget
// (bucket_table.hpp, "Budget bound"), neither on its cpu nor in the pool, evicts:
// it samples k = eviction_samples distinct random non-empty buckets (at most
// eviction_probes probes, 8k by default), removes every expired entry there, and if
// there was none, the least recently touched entry of those buckets, then tries again
// (at most eviction_attempts times). It does so without walking every sampled bucket:
// each bucket keeps two hints, written under its lock and read without it, that never
// exceed the least last_used and the least deadline of its entries (exact after a
// walk of its whole chain). Sampling reads only the hints; then, each under its lock,
// it expires the sampled buckets whose deadline hint has come, and walks the others
// in order of their last_used hint until the next hint is no older than the oldest
// entry found: none left unwalked can hold an older one. (Under a flood of entries
// created and not touched again the hints are exact, and it walks one bucket.) Locks
// are taken with try_lock only, since it may hold the lock of the bucket it is
// visiting; a sampled bucket found busy is being visited, so fresh, and another is
// sampled in its place. It never evicts the entry being visited. So an insertion
// never fails while sampled buckets hold entries, stale entries (expired, or old) go
// before fresh ones, and no flood of new keys locks out live traffic: under a flood,
// the victim is the oldest of the entries of k random buckets (as they were when
// their hints were read). A live entry last touched at time t is evicted only if every
// sampled bucket holds nothing older: if a fraction q of the occupied buckets hold
// only entries touched after t, one eviction removes an entry touched after t with
// probability at most q^k (with k = 8: 0.4% for q = 1/2, 43% for q = 0.9). To evict
// live entries reliably, an attacker must keep nearly the whole budget fresher than
// they are, that is, refresh about the whole budget within the lifetime of a live
// entry (a few ms for a datagram's fragments); a flood of entries that are created
// and then left alone evicts only its own oldest.
//
// Shares. With shares = n > 1, an eviction for a charge made while visiting an entry
// of share q (options), whose entries hold at least three quarters of its part of the
// budget (3 budget / 4n bytes), samples share q only (then as above: expired first,
// else the oldest; at most 8 probes a bucket of the share); if that evicts nothing
// (its entries busy, or only the visited one), the same attempt samples the whole
// table. A share holding less samples the whole table. A caller whose threads each
// own a share (its hash places each one's entries there, as RSS and RPS place flows on
// cores) then evicts what its own thread wrote, in its own cpu's cache: at two workers
// under a flood, sampling the whole table read at each eviction lines the other core
// had just written (two workers were half as fast as one), and even one sample in
// eight drawn anywhere cost most of the gain (docs/bucket_table.md). What it
// guarantees: the guarantee above within each share holding its three quarters; the
// entries of a share holding less are never taken by another share's evictions within
// itself, only by samples of the whole table, by age, as without shares. It reserves
// nothing: per-core tables (DPDK) keep budget / n for each core whatever the others
// do. The price: entries parked in other shares (old, never touched again) are not
// evicted for a share holding its three quarters, which evicts its own oldest instead,
// until they expire or their own share's charges evict them. (At half its part, the
// busiest shares of live entries beside a one-share flood passed it and evicted their
// own live entries.) Each share's bytes are counted (a relaxed add on the share's own
// line per charge and per removal); they decide only which buckets are sampled, never
// the budget bound.
//
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "hotpath/bucket_table.hpp"
#include "hotpath/detail/annotations.hpp"
#include "hotpath/detail/config.hpp"
#include "hotpath/detail/table_sampler.hpp"

namespace hotpath {

// Holding b's lock: walks b's chain, unlinking every entry whose deadline has come
// (except keep), uncharging it (into *freed, the caller's hands, if given: an
// eviction's) and putting it on rl, until stop(n) holds for an entry that stays.
// Returns that entry (null if none) and, over the entries passed that stay, the least
// recently touched other than keep and the minima of last_used and deadline. Not
// noexcept: stop may compare keys, and a Key's == may throw (find_or_create() and
// visit() let it through).
template <class Key, class T, class Hash, class Lock, class Policy>
template <class Stop>
inline auto bucket_table<Key, T, Hash, Lock, Policy>::walk_chain(bucket& b, std::int64_t now,
                                                                 node* keep, reclaim_lists& rl,
                                                                 std::int64_t* freed, Stop stop)
    -> chain_walk {
  chain_walk w;
  node* prev = nullptr;
  for (node* n = b.head.load(std::memory_order_relaxed); n;) {
    node* next = n->next;
    if (n != keep && n->deadline <= now) {
      unlink(b, prev, n);
      uncharge(n, freed);
      reclaim_lists::push(rl.expired, n);
    } else if (stop(n)) {
      w.stopped = n;
      break;
    } else {
      prev = n;
      if (n != keep && (!w.lru || n->last_used < w.lru->last_used)) w.lru = n;
      w.oldest = std::min(w.oldest, n->last_used);
      w.due = std::min(w.due, n->deadline);
    }
    n = next;
  }
  return w;
}

// The whole chain: what is due goes, the hints become exact; returns the least
// recently touched entry left other than keep (null if none).
template <class Key, class T, class Hash, class Lock, class Policy>
inline auto bucket_table<Key, T, Hash, Lock, Policy>::expire_chain(bucket& b, std::int64_t now,
                                                                   node* keep, reclaim_lists& rl,
                                                                   std::int64_t* freed) noexcept
    -> node* {
  const chain_walk w =
      walk_chain(b, now, keep, rl, freed, [](const node*) noexcept { return false; });
  set_hints(b, w.oldest, w.due);
  return w.lru;
}

// Reserves delta; over budget, evicts (at most eviction_attempts times) and
// tries again. Holding held's lock (may be null); never evicts protect.
template <class Key, class T, class Hash, class Lock, class Policy>
inline bool bucket_table<Key, T, Hash, Lock, Policy>::try_charge(std::int64_t delta, bucket* held,
                                                                 node* protect, std::int64_t now,
                                                                 reclaim_lists& rl) noexcept {
  if (delta <= 0) {
    budget_.give_back(-delta);
    return true;
  }
  if (delta > opt_.budget) return false;  // would not fit in an empty table: evict nothing
  std::int64_t freed = 0;                 // by this charge's evictions: in its hands, no one else's
  // Before an eviction: what is near and the reserves this thread filled; every
  // cpu's reserve only at the last attempt, and after an eviction that found nothing
  // (detail/table_budget.hpp: gathering the others moved a line at every charge).
  bool gather = opt_.eviction_attempts == 0;
  for (unsigned attempt = 0;; ++attempt) {
    if (freed >= delta) {
      budget_.give_back(freed - delta);
      return true;
    }
    if (budget_.take(delta - freed, gather)) return true;
    if (attempt == opt_.eviction_attempts) {
      budget_.give_back(freed);
      return false;
    }
    const std::int64_t before = freed;
    const bool within = evict(held, protect, now, rl, freed, true);
    // Its share held nothing to take (its entries busy, or only this one): the whole
    // table, in the same attempt.
    if (within && freed == before) evict(held, protect, now, rl, freed, false);
    gather = freed == before || attempt + 1 == opt_.eviction_attempts;
  }
}

// One eviction round (above). Samples distinct non-empty buckets and reads
// their hints without locking them. Then it locks, one at a time, the samples whose
// deadline hint has come (expiring what is due there), and, unless that freed
// something, the samples in order of their last_used hint while one may hold an
// entry older than the oldest found so far. Under a flood of entries that are never
// touched again the hints are exact, and it locks and walks one bucket.
// Probes go in batches: a batch's buckets are all loaded before any is examined, so
// that their cache misses overlap, and the first entry of each kept sample is
// prefetched. (Random buckets, not a run of neighbours: evictions empty a run of its
// oldest entries, and the next run over it would then find only fresh ones, live
// entries among them.)
// Holds at most three bucket locks (held, the best so far, the one scanned); all
// but held are taken with try_lock, so it cannot deadlock. (Which locks it holds
// depends on the data, which clang's thread-safety analysis cannot follow.)
// What it removes, it adds to freed (the caller's hands). With shares and
// within_share, it samples only the share of held when that share holds its floor
// ("Shares" above); returns whether it did.
template <class Key, class T, class Hash, class Lock, class Policy>
inline bool bucket_table<Key, T, Hash, Lock, Policy>::evict(
    bucket* held, node* protect, std::int64_t now, reclaim_lists& rl, std::int64_t& freed_bytes,
    bool within_share) noexcept HOTPATH_NO_THREAD_SAFETY_ANALYSIS {
  struct sample {
    bucket* b;
    std::int64_t oldest;  // its hints when sampled
    std::int64_t due;
    bool done;  // locked and walked
  };
  sample s[max_eviction_samples];
  unsigned want = opt_.eviction_samples;
  unsigned have = 0;
  unsigned max_probes = opt_.eviction_probes;
  unsigned probes = 0;
  random_indices pick(index_bits_);
  // Where a probe lands: buckets [lo, lo + size), size 0 for the whole table.
  std::size_t lo = 0, size = 0;
  // Adds distinct non-empty buckets to s until it holds `want` or the probes run out.
  auto draw = [&] {
    // In locals for the loops: through the closure's references they would live in
    // memory, and every probe would wait on a store of the last one's counts.
    unsigned n_have = have, n_probes = probes;
    random_indices rng = pick;
    while (n_have < want && n_probes < max_probes) {
      // Probes until as many non-empty buckets are found as are still wanted,
      // keeping them without a branch: whether a random bucket is empty cannot be
      // predicted. The probes' loads do not depend on one another, so their cache
      // misses overlap. (A hint, read without the lock: an empty bucket is not
      // worth its lock.)
      bucket* found[max_eviction_samples];
      node* first[max_eviction_samples];  // their first entries, as loaded
      const unsigned need = want - n_have;
      unsigned n = 0;
      while (n < need && n_probes < max_probes) {
        std::size_t i = rng.next() & mask_;
        // Within the share: i scaled to its size (multiply and shift, no division).
        if (size != 0) i = lo + detail::scale(i, size, index_bits_);
        bucket* b = &buckets_[i];
        ++n_probes;
        node* const h = b->head.load(std::memory_order_relaxed);
        found[n] = b;
        first[n] = h;
        n += h != nullptr;
      }
      for (unsigned i = 0; i < n; ++i) {
        bucket& b = *found[i];
        if (std::any_of(s, s + n_have, [&](const sample& x) { return x.b == &b; })) continue;
        // Relaxed: hints, checked under the lock before they decide (lower_hint()).
        s[n_have++] = {&b, b.oldest.load(std::memory_order_relaxed),
                       b.due.load(std::memory_order_relaxed), false};
        // Its first entry, where a walk of it would start. (Read again under the
        // lock; a prefetch of a node freed meanwhile is harmless. Not loaded again
        // here: under tests/support/schedule.hpp every atomic load is a scheduling
        // point, and one more would change every seed's schedule.)
        __builtin_prefetch(first[i]);
      }
    }
    have = n_have;
    probes = n_probes;
    pick = rng;
  };
  // With shares, a charge for an entry of a share holding at least three quarters of
  // its part of the budget samples that share only (header comment, "Shares").
  if (within_share && shares_ && held) {
    const std::size_t q = share_of(static_cast<std::size_t>(held - buckets_.get()));
    if (shares_[q].bytes.load(std::memory_order_relaxed) >= share_floor_) {
      lo = shares_[q].lo;
      size = shares_[q].size;
      // As for the whole table: at most 8 probes a bucket, and no more samples than
      // buckets (a small share would spend every probe on each eviction).
      max_probes = static_cast<unsigned>(std::min<std::size_t>(max_probes, 8 * size));
      want = static_cast<unsigned>(std::min<std::size_t>(want, size));
    }
  }
  draw();
  bucket* best_b = nullptr;
  node* best = nullptr;
  bool freed = false;
  for (;;) {
    sample* next = nullptr;
    for (unsigned i = 0; i < have && !next; ++i)
      if (!s[i].done && s[i].due <= now) next = &s[i];  // expired entries go first
    if (!next && !freed) {
      for (unsigned i = 0; i < have; ++i)
        if (!s[i].done && (!next || s[i].oldest < next->oldest)) next = &s[i];
      // The hint bounds every entry there: none is older than best.
      if (next && best && next->oldest >= best->last_used) next = nullptr;
    }
    if (!next) break;
    next->done = true;
    bucket& b = *next->b;
    const bool own = &b == held;
    if (!own && !b.lock.try_lock()) {  // busy: being visited, so fresh; sample another
      *next = s[--have];
      draw();
      continue;
    }
    node* before = rl.expired;
    node* oldest = expire_chain(b, now, protect, rl, &freed_bytes);
    freed |= rl.expired != before;
    if (oldest && (!best || oldest->last_used < best->last_used)) {
      if (best_b && best_b != held) best_b->lock.unlock();
      best_b = &b;
      best = oldest;
    } else if (!own) {
      b.lock.unlock();
    }
  }
  if (best && !freed) {
    node* prev = nullptr;
    for (node* n = best_b->head.load(std::memory_order_relaxed); n != best; n = n->next)
      prev = n;
    unlink(*best_b, prev, best);
    uncharge(best, &freed_bytes);
    reclaim_lists::push(rl.evicted, best);
    rehint(*best_b);  // its chain is in cache; exact hints spare a later walk here
  }
  if (best_b && best_b != held) best_b->lock.unlock();
  return size != 0;
}

}  // namespace hotpath
