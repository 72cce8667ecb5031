// SPDX-License-Identifier: MIT
// Locks: every hotpath lock (default policy: bounded spin, yield, then park) against
// std::mutex, a test-and-set spinlock, oneTBB's spin_mutex, queuing_mutex (MCS) and
// mutex, absl::Mutex, and Concurrency Kit's MCS and ticket spinlocks, each where
// installed. Per lock: lock/uncontended/NAME (one thread, lock + unlock),
// lock/contended/NAME (throughput, fairness, CPU per operation at each thread
// count) and lock/latency/NAME (lock() call latency percentiles; a separate pass,
// as timing every call slows the loop).
#include <mutex>

#include "hotpath/mcs_lock.hpp"
#include "hotpath/priority_lock.hpp"
#include "hotpath/queued_lock.hpp"
#include "hotpath/ticket_lock.hpp"
#include "showdown.hpp"

#if defined(HOTPATH_HAVE_TBB)
#include <oneapi/tbb/mutex.h>
#include <oneapi/tbb/queuing_mutex.h>
#include <oneapi/tbb/spin_mutex.h>
#endif
#if defined(HOTPATH_HAVE_ABSL)
#include <absl/synchronization/mutex.h>
#endif
#if defined(HOTPATH_HAVE_CK)
#include "ck_locks.h"
#endif

namespace {

#if defined(HOTPATH_HAVE_TBB)
// queuing_mutex takes a scoped_lock holding the queue node; keep it per thread.
class tbb_queuing {
 public:
  void lock() { node().acquire(m_); }
  void unlock() { node().release(); }

 private:
  static tbb::queuing_mutex::scoped_lock& node() {
    thread_local tbb::queuing_mutex::scoped_lock n;
    return n;
  }
  tbb::queuing_mutex m_;
};
#endif

#if defined(HOTPATH_HAVE_ABSL)
// A capability for clang's analysis, as absl::Mutex is (wrapped, it would not be).
class HOTPATH_CAPABILITY("mutex") absl_mutex {
 public:
  void lock() HOTPATH_ACQUIRE() { m_.Lock(); }
  void unlock() HOTPATH_RELEASE() { m_.Unlock(); }

 private:
  absl::Mutex m_;
};
#endif

#if defined(HOTPATH_HAVE_CK)
template <void (*Init)(hotpath_ck_storage*), void (*Lock)(hotpath_ck_storage*),
          void (*Unlock)(hotpath_ck_storage*)>
class ck_lock {
 public:
  ck_lock() { Init(&s_); }
  void lock() { Lock(&s_); }
  void unlock() { Unlock(&s_); }

 private:
  hotpath_ck_storage s_;
};
using ck_ticket = ck_lock<hotpath_ck_ticket_init, hotpath_ck_ticket_lock, hotpath_ck_ticket_unlock>;
using ck_mcs = ck_lock<hotpath_ck_mcs_init, hotpath_ck_mcs_lock, hotpath_ck_mcs_unlock>;
#endif

void register_locks(const hotpath::showdown::options& so) {
  using hotpath::bench::register_lock;
  hotpath::bench::lock_bench_options o;
  o.prefix = "lock/";
  o.threads = so.threads;
  o.window_ms = so.window_ms;
  o.latency = true;
  register_lock<std::mutex>("std::mutex", o);
  register_lock<hotpath::bench::tas_lock>("test-and-set", o);
#if defined(HOTPATH_HAVE_TBB)
  register_lock<tbb::spin_mutex>("tbb::spin_mutex", o);
  register_lock<tbb_queuing>("tbb::queuing_mutex", o);
  register_lock<tbb::mutex>("tbb::mutex", o);
#endif
#if defined(HOTPATH_HAVE_ABSL)
  register_lock<absl_mutex>("absl::Mutex", o);
#endif
#if defined(HOTPATH_HAVE_CK)
  register_lock<ck_mcs>("ck_spinlock_mcs", o);
  register_lock<ck_ticket>("ck_spinlock_ticket", o);
#endif
  register_lock<hotpath::ticket_lock>("hotpath::ticket_lock", o);
  register_lock<hotpath::mcs_lock>("hotpath::mcs_lock", o);
  register_lock<hotpath::queued_lock>("hotpath::queued_lock", o);
  register_lock<hotpath::priority_lock>("hotpath::priority_lock", o);
}
HOTPATH_SHOWDOWN(register_locks);

}  // namespace
