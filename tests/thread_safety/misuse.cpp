// SPDX-License-Identifier: MIT
// Lock misuse that clang's thread-safety analysis must reject at compile time, once
// per hotpath lock (detail/annotations.hpp). tests/CMakeLists.txt compiles it with
// -Wthread-safety -Werror, HOTPATH_TEST_LOCK naming the lock and HOTPATH_TEST_CASE
// the misuse, and expects the analysis's error; `correct` must compile, and so must
// every case with HOTPATH_NO_THREAD_ANNOTATIONS (what the annotations add).
#include <hotpath/mcs_lock.hpp>
#include <hotpath/priority_lock.hpp>
#include <hotpath/queued_lock.hpp>
#include <hotpath/ticket_lock.hpp>

namespace {

using lock_type = hotpath::HOTPATH_TEST_LOCK;

struct account {
  lock_type lock;
  long balance HOTPATH_GUARDED_BY(lock) = 0;
};

#define CASE_unguarded 1
#define CASE_missing_unlock 2
#define CASE_double_unlock 3
#define CASE_after_guard 4
#define CASE_cede_unlocked 5
#define CASE_correct 6
#define CASE_ID(x) CASE_##x
#define CASE_OF(x) CASE_ID(x)

#if CASE_OF(HOTPATH_TEST_CASE) == CASE_unguarded
void deposit(account& a) {
  a.balance += 1;
}  // no lock held
#elif CASE_OF(HOTPATH_TEST_CASE) == CASE_missing_unlock
void deposit(account& a) {
  a.lock.lock();
  a.balance += 1;
}  // returns holding a.lock
#elif CASE_OF(HOTPATH_TEST_CASE) == CASE_double_unlock
void deposit(account& a) {
  a.lock.lock();
  a.balance += 1;
  a.lock.unlock();
  a.lock.unlock();
}
#elif CASE_OF(HOTPATH_TEST_CASE) == CASE_after_guard    // mcs_lock's scoped guard
void deposit(account& a) {
  {
    lock_type::guard g(a.lock);
    a.balance += 1;
  }
  a.balance += 1;  // the guard is gone
}
#elif CASE_OF(HOTPATH_TEST_CASE) == CASE_cede_unlocked  // priority_lock::cede()
void deposit(account& a) {
  a.lock.cede();
}  // only the owner may cede
#elif CASE_OF(HOTPATH_TEST_CASE) == CASE_correct
void deposit(account& a) {
  a.lock.lock();
  a.balance += 1;
  a.lock.unlock();
  if (a.lock.try_lock()) {
    a.balance += 1;
    a.lock.unlock();
  }
}
#else
#error "unknown HOTPATH_TEST_CASE"
#endif

}  // namespace

int main() {
  account a;
  deposit(a);
  return 0;
}
