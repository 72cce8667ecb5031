// SPDX-License-Identifier: MIT
// rcu_domain when memory runs out: a thread's first read-side section needs a reader
// slot, and lock() is noexcept and never waits. Where none is free and none can be
// allocated, the section takes a reserve slot, or with every reserve slot in a
// section is counted apart; writers wait for both. A program of its own, because it
// replaces operator new (support/alloc_hook.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "hotpath/rcu.hpp"
#include "support/alloc_hook.hpp"

namespace hotpath::test {
namespace {

// Threads that each hold a reader slot (a thread keeps its slot until it exits, out
// of any section) until released, started until one of them had to allocate a slot:
// then no slot of the list is free, and the next thread to enter a section must
// allocate one too.
class slot_holders {
 public:
  slot_holders() {
    for (;;) {
      const std::size_t before = rcu_default_domain().reader_slots();
      std::atomic<bool> in{false};
      threads_.emplace_back([this, &in] {
        { std::scoped_lock<rcu_domain> section(rcu_default_domain()); }
        in.store(true);
        release_.wait(false);
      });
      while (!in.load())
        std::this_thread::yield();
      if (rcu_default_domain().reader_slots() > before) break;
    }
  }
  ~slot_holders() {
    release_.store(true);
    release_.notify_all();
    for (std::thread& t : threads_)
      t.join();
  }

 private:
  std::atomic<bool> release_{false};
  std::vector<std::thread> threads_;
};

// Starts a writer (rcu_synchronize()) while a reader is in a section, waits until the
// writer has started and 50 ms more, then calls release(), after which
// the reader sets `leaving` inside its section and ends it. True if the writer
// returned before `leaving` was set: a grace period ended inside the section. (A
// writer that does not wait is caught if it gets to its check within the 50 ms.)
template <class Release>
bool writer_returned_inside(const std::atomic<bool>& leaving, Release&& release) {
  std::atomic<bool> started{false}, early{false};
  std::thread writer([&] {
    started.store(true);
    rcu_synchronize();
    early.store(!leaving.load());
  });
  while (!started.load())
    std::this_thread::yield();
  // Long enough for a writer that does not wait to return; a writer that does wait
  // cannot fail however long this takes.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  release();
  writer.join();
  return early.load();
}

// The first section of a thread that cannot allocate a slot runs in a reserve slot,
// and a grace period waits for it: rcu_synchronize() returns only after the section
// ended. (Were the reserve slot not scanned, it would return at once.) After the
// section the slot is given back, and the thread's next section allocates a slot.
TEST(RcuAlloc, FirstSectionWithoutMemoryHoldsOffGracePeriods) {
  const slot_holders holders;
  std::atomic<bool> in{false}, go{false}, left{false};
  std::uint64_t failures = 0;
  std::size_t slots_after = 0;
  const std::size_t slots_before = rcu_default_domain().reader_slots();
  std::thread reader([&] {
    alloc_hook::fail_all();
    rcu_default_domain().lock();
    alloc_hook::no_failure();
    failures = alloc_hook::failures();
    in.store(true);
    while (!go.load())
      std::this_thread::yield();
    left.store(true);
    rcu_default_domain().unlock();
    std::scoped_lock<rcu_domain> again(rcu_default_domain());  // memory again
    slots_after = rcu_default_domain().reader_slots();
  });
  while (!in.load())
    std::this_thread::yield();
  EXPECT_FALSE(writer_returned_inside(left, [&] { go.store(true); }))
      << "a grace period ended inside the section";
  reader.join();
  EXPECT_GE(failures, 1u) << "no allocation was attempted: a free slot was reused";
  EXPECT_EQ(slots_after, slots_before + 1);
}

// More threads than reserve slots, none able to allocate: each section takes a reserve
// slot or is counted apart, and every one of them runs, with a writer ending grace
// periods throughout. Inside each, a value published under RCU is checked live (a
// value freed too early is seen only by chance outside ASan).
TEST(RcuAlloc, MoreSectionsWithoutMemoryThanReserveSlots) {
  const slot_holders holders;
  struct value {
    std::atomic<int> alive{1};
  };
  std::atomic<value*> current{new value};
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    while (!stop.load()) {
      value* old = current.exchange(new value);
      rcu_synchronize();
      old->alive.store(0);
      delete old;
    }
  });
  constexpr int threads = 12, sections = 200;
  std::atomic<int> ran{0}, dead{0};
  std::atomic<std::uint64_t> failures{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < threads; ++t) {
    readers.emplace_back([&] {
      for (int k = 0; k < sections; ++k) {
        alloc_hook::fail_all();
        rcu_default_domain().lock();
        const value* v = current.load(std::memory_order_acquire);
        std::this_thread::yield();
        if (v->alive.load() != 1) dead.fetch_add(1);
        rcu_default_domain().unlock();
        alloc_hook::no_failure();
        ran.fetch_add(1);
      }
      failures.fetch_add(alloc_hook::failures());
    });
  }
  for (std::thread& t : readers)
    t.join();
  stop.store(true);
  writer.join();
  delete current.load();
  EXPECT_EQ(ran.load(), threads * sections);
  EXPECT_EQ(dead.load(), 0) << "a value was reclaimed inside a section";
  // No section allocated a slot: each one found none free and none to allocate.
  EXPECT_GE(failures.load(), static_cast<std::uint64_t>(threads * sections));
}

// With every reserve slot in a section, a thread without memory still enters at once
// (lock() never waits: a reserve slot's holder might be waiting for what it holds),
// counted apart, and a grace period waits for it too.
TEST(RcuAlloc, SectionWithEveryReserveSlotTakenDoesNotWait) {
  const slot_holders holders;
  std::atomic<int> holding{0};
  std::atomic<bool> release{false};
  std::vector<std::thread> reserved;
  for (int k = 0; k < 4; ++k) {  // basic_rcu_domain's reserve slots
    reserved.emplace_back([&] {
      alloc_hook::fail_all();
      rcu_default_domain().lock();
      alloc_hook::no_failure();
      holding.fetch_add(1);
      release.wait(false);
      rcu_default_domain().unlock();
    });
  }
  while (holding.load() != 4)
    std::this_thread::yield();
  std::atomic<bool> in{false}, go{false}, left{false};
  std::thread reader([&] {
    alloc_hook::fail_all();
    rcu_default_domain().lock();
    alloc_hook::no_failure();
    in.store(true);
    go.wait(false);
    left.store(true);
    rcu_default_domain().unlock();
  });
  // A lock() that waited for a reserve slot would not return: given a minute, fail,
  // and let it go by ending the reserve slots' sections.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!in.load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_TRUE(in.load()) << "lock() waited while every reserve slot was in a section";
  release.store(true);  // the reserve slots' sections end: only the counted one is open
  release.notify_all();
  for (std::thread& t : reserved)
    t.join();
  while (!in.load())
    std::this_thread::yield();
  EXPECT_FALSE(writer_returned_inside(left, [&] {
    go.store(true);
    go.notify_all();
  })) << "a grace period ended inside the counted section";
  reader.join();
}

}  // namespace
}  // namespace hotpath::test
