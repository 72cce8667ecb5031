// SPDX-License-Identifier: MIT
// queued_lock where allocation is not allowed or fails: contention from inside a
// real signal handler, and the queue path out of memory. A program of its own,
// because it replaces operator new (support/alloc_hook.hpp) to count and fail
// allocations.
#include <gtest/gtest.h>
#include <pthread.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <thread>

#include "hotpath/queued_lock.hpp"
#include "support/alloc_hook.hpp"
#include "support/lock_test_access.hpp"
#include "support/signals.hpp"
#include "support/stress.hpp"

namespace hotpath::test {
namespace {

using namespace std::chrono_literals;

// Each test uses a policy of its own, hence a node table of its own that no earlier
// test has filled: the first queue wait of a chunk is what could allocate.
template <unsigned Tag>
using fresh_lock = basic_queued_lock<basic_policy<spin_then_park<256 + Tag>>>;

// Wait (bounded) until the lock word satisfies pred.
template <class Lock, class Pred>
bool wait_state(const Lock& l, Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!pred(lock_test_access::state(l))) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(100us);
  }
  return true;
}

// Holds `lock`; a second thread takes pending, so whoever comes next queues on a
// node. Calls `third()` (which makes a third contender), waits until the word shows
// it waiting (`waiting`: by default, a queue tail), then releases and joins.
template <class Lock, class Third>
void with_a_queue(Lock& lock, Third third, std::uint32_t waiting = Lock::tail_mask) {
  lock.lock();
  std::thread pending([&] {
    lock.lock();
    lock.unlock();
  });
  ASSERT_TRUE(wait_state(lock, [](std::uint32_t w) { return (w & Lock::pending) != 0; }));
  third();
  ASSERT_TRUE(wait_state(lock, [waiting](std::uint32_t w) { return (w & waiting) != 0; }));
  lock.unlock();
  pending.join();
}

namespace sig {
using lock_type = fresh_lock<1>;
lock_type lock;
volatile std::sig_atomic_t try_lock_result = -1;
volatile std::sig_atomic_t done = 0;
std::uint64_t allocations_in_handler = ~std::uint64_t{0};
std::uint64_t sections = 0;

void handler(int) {
  const std::uint64_t before = alloc_hook::count();
  try_lock_result = lock.try_lock() ? 1 : 0;  // held by the main thread: false
  if (try_lock_result == 1) lock.unlock();
  lock.lock();  // queues behind the pending owner
  ++sections;
  lock.unlock();
  allocations_in_handler = alloc_hook::count() - before;
  done = 1;
}
}  // namespace sig

// A thread prepared with prepare_thread() contends from inside a signal handler:
// the handler's try_lock() and queued lock() allocate nothing (malloc is not
// async-signal-safe and could deadlock on the interrupted thread's own malloc lock).
TEST(QueuedLockSignal, HandlerContendsWithoutAllocating) {
  scoped_signal_handler handler(SIGUSR1, sig::handler, SA_RESTART);
  ASSERT_TRUE(handler.installed());
  std::atomic<bool> prepared{false};
  bool ok = false;
  std::thread target([&] {
    ok = sig::lock_type::prepare_thread();
    prepared.store(true, std::memory_order_release);
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (sig::done == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(100us);  // the handler runs here
  });
  while (!prepared.load(std::memory_order_acquire))
    std::this_thread::sleep_for(100us);
  with_a_queue(sig::lock, [&] { pthread_kill(target.native_handle(), SIGUSR1); });
  target.join();
  EXPECT_TRUE(ok);
  ASSERT_EQ(sig::done, 1);
  EXPECT_EQ(sig::try_lock_result, 0);
  EXPECT_EQ(sig::sections, 1u);
  EXPECT_EQ(sig::allocations_in_handler, 0u);
  EXPECT_FALSE(sig::lock.is_locked());
}

namespace interrupt {
std::atomic<int> delivered{0};
void handler(int) {
  delivered.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace interrupt

// A queued waiter asleep on its futex, interrupted by a signal (no SA_RESTART: the
// wait returns EINTR) and woken later, returns from lock() with errno as it was
// before: a lock must not change errno (detail::errno_keeper).
TEST(QueuedLockSignal, ParkedWaiterInterruptedBySignalLeavesErrnoAlone) {
  using lock_type = fresh_lock<3>;
  lock_type lock;
  scoped_signal_handler handler(SIGUSR2, interrupt::handler, 0);
  ASSERT_TRUE(handler.installed());
  std::atomic<pid_t> tid{0};
  int errno_after = 0;
  std::thread third;
  bool interrupted = false;
  with_a_queue(lock, [&] {
    third = std::thread([&] {
      tid.store(static_cast<pid_t>(syscall(SYS_gettid)), std::memory_order_release);
      errno = EDOM;
      lock.lock();
      errno_after = errno;
      lock.unlock();
    });
    while (tid.load(std::memory_order_acquire) == 0)
      std::this_thread::sleep_for(100us);
    // Asleep (after its spins) in the futex, then interrupted there, then asleep again.
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!thread_sleeps(tid.load()) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(100us);
    pthread_kill(third.native_handle(), SIGUSR2);
    while (interrupt::delivered.load() == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(100us);
    interrupted = interrupt::delivered.load() == 1;
  });
  third.join();
  EXPECT_TRUE(interrupted);
  EXPECT_EQ(errno_after, EDOM);
  EXPECT_FALSE(lock.is_locked());
}

// Out of memory for the node chunk: lock() (noexcept) neither throws nor
// terminates; the thread waits without a node (the overflow path) and gets the lock,
// with errno as it was (the failed allocation set ENOMEM).
TEST(QueuedLockSignal, QueueWaitOutOfMemoryFallsBackToOverflow) {
  using lock_type = fresh_lock<2>;
  lock_type lock;
  std::atomic<bool> locked{false};
  std::uint64_t failed = 0;
  int errno_after = 0;
  bool prepared_later = false;
  std::thread third;
  // The overflow waiter announces itself with `parked`, not with a tail.
  with_a_queue(
      lock,
      [&] {
        third = std::thread([&] {
          EXPECT_NE(detail::thread_slot_registry::this_thread_slot(),
                    detail::thread_slot_registry::no_slot);
          alloc_hook::fail_after(0);  // the node chunk
          errno = EDOM;
          lock.lock();
          errno_after = errno;
          locked.store(true, std::memory_order_relaxed);
          failed = alloc_hook::failures();
          alloc_hook::no_failure();
          lock.unlock();
          prepared_later = lock_type::prepare_thread();
        });
      },
      lock_type::parked);
  third.join();
  EXPECT_TRUE(locked.load());
  EXPECT_EQ(failed, 1u) << "the queue path did not allocate: nothing was tested";
  EXPECT_EQ(errno_after, EDOM);
  EXPECT_TRUE(prepared_later);
  EXPECT_FALSE(lock.is_locked());
}

// The first thread slot of the process, out of memory: this_thread_slot() (noexcept)
// neither throws nor terminates (the registry once came from new), and a thread gets a
// slot once memory is back. Meaningful where nothing in the process used a slot
// before, as when ctest runs this test alone.
TEST(QueuedLockSignal, FirstThreadSlotOutOfMemoryNeitherThrowsNorTerminates) {
  std::uint32_t without = 0, with = 0;
  std::thread([&] {
    alloc_hook::fail_all();
    without = detail::thread_slot_registry::this_thread_slot();
    alloc_hook::no_failure();
    with = detail::thread_slot_registry::this_thread_slot();
  }).join();
  EXPECT_NE(with, detail::thread_slot_registry::no_slot);
  if (without != detail::thread_slot_registry::no_slot) {
    EXPECT_EQ(without, with);
  }
}

}  // namespace
}  // namespace hotpath::test
