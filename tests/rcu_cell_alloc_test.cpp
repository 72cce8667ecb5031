// SPDX-License-Identifier: MIT
// rcu_cell when allocation fails: a store() or update() that throws has changed
// nothing and leaked nothing, and the destructor allocates nothing. A program of
// its own, because it replaces operator new (support/alloc_hook.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <new>
#include <stdexcept>

#include "hotpath/rcu_cell.hpp"
#include "support/alloc_hook.hpp"

namespace hotpath::test {
namespace {

// A value whose constructor allocates nothing, counting live instances.
struct value {
  static inline std::atomic<long> live{0};
  long a;
  explicit value(long x) : a(x) { live.fetch_add(1, std::memory_order_relaxed); }
  value(const value& o) : a(o.a) { live.fetch_add(1, std::memory_order_relaxed); }
  ~value() { live.fetch_sub(1, std::memory_order_relaxed); }
};

TEST(RcuCellAlloc, StoreThatCannotAllocateChangesNothing) {
  rcu_barrier();
  const long live = value::live.load();
  {
    rcu_cell<value> cell(std::make_unique<value>(1));
    for (long k = 0;; ++k) {
      auto next = std::make_unique<value>(2 + k);
      const std::uint64_t failed = alloc_hook::failures();
      alloc_hook::fail_after(k);
      bool threw = false;
      try {
        cell.store(std::move(next));
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      alloc_hook::no_failure();
      const bool injected = alloc_hook::failures() != failed;
      EXPECT_EQ(threw, injected) << k;
      // Thrown: the old value is still there. Returned: the new one is.
      EXPECT_EQ(cell.read()->a, threw ? 1 + k : 2 + k) << k;
      if (!threw) break;  // every allocation of store() has been made to fail once
      cell.store(std::make_unique<value>(2 + k));  // where the next round starts
    }
    EXPECT_GT(alloc_hook::failures(), 0u);
  }
  rcu_barrier();
  EXPECT_EQ(value::live.load(), live) << "values leaked or freed twice";
  EXPECT_EQ(rcu_default_domain().backlog_bytes(), 0u) << "a failed store kept its charge";
}

TEST(RcuCellAlloc, UpdateThatCannotAllocateChangesNothing) {
  rcu_barrier();
  const long live = value::live.load();
  {
    rcu_cell<value> cell(std::make_unique<value>(0));
    long expected = 0;
    for (long k = 0;; ++k) {
      const std::uint64_t failed = alloc_hook::failures();
      alloc_hook::fail_after(k);
      bool threw = false;
      try {
        cell.update([](const value& v) { return value(v.a + 1); });
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      alloc_hook::no_failure();
      EXPECT_EQ(threw, alloc_hook::failures() != failed) << k;
      if (!threw) ++expected;
      EXPECT_EQ(cell.read()->a, expected) << k;
      if (!threw) break;
    }
    EXPECT_GE(alloc_hook::failures(), 2u) << "update() allocates the node and the value";
    // An f that throws to refuse the update: nothing changes, nothing stays counted.
    for (int i = 0; i < 3; ++i)
      EXPECT_THROW(cell.update([](const value&) -> value { throw std::runtime_error("no"); }),
                   std::runtime_error);
    EXPECT_EQ(cell.read()->a, expected);
  }
  rcu_barrier();
  EXPECT_EQ(value::live.load(), live) << "values leaked or freed twice";
  EXPECT_EQ(rcu_default_domain().backlog_bytes(), 0u) << "a failed update kept its charge";
}

// Any allocation in the destructor would throw here (and terminate: destructors
// are noexcept); none may happen, and the last value is still reclaimed.
TEST(RcuCellAlloc, DestructorAllocatesNothing) {
  rcu_barrier();
  const long live = value::live.load();
  auto cell = std::make_unique<rcu_cell<value>>(std::make_unique<value>(7));
  cell->store(std::make_unique<value>(8));
  { auto g = cell->read(); }  // the reader slot exists before we count
  const std::uint64_t before = alloc_hook::count();
  alloc_hook::fail_after(0);
  rcu_cell<value>* raw = cell.release();
  raw->~rcu_cell<value>();
  alloc_hook::no_failure();
  EXPECT_EQ(alloc_hook::count() - before, 0u);
  ::operator delete (static_cast<void*>(raw), std::align_val_t{alignof(rcu_cell<value>)});
  rcu_barrier();
  EXPECT_EQ(value::live.load(), live);
}

}  // namespace
}  // namespace hotpath::test
