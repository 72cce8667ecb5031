// SPDX-License-Identifier: MIT
// priority_lock's privileged side is the same capability as its ordinary side: data
// guarded by the lock may be touched after lock_priority() or under privileged(),
// and not after the unlock. Compiled as misuse.cpp is (HOTPATH_TEST_CASE: correct,
// or after_unlock, which must be rejected).
#include <hotpath/priority_lock.hpp>

namespace {

struct queue {
  hotpath::priority_lock lock;
  long packets HOTPATH_GUARDED_BY(lock) = 0;
};

long drain(queue& q) {
  q.lock.lock_priority();
  long n = q.packets;
  q.packets = 0;
  q.lock.unlock();
  q.lock.privileged().lock();
  n += q.packets;
  q.lock.privileged().unlock();
  if (q.lock.try_lock_priority()) {
    q.packets = 0;
    q.lock.unlock();
  }
#if HOTPATH_TEST_AFTER_UNLOCK
  n += q.packets;  // no longer held
#endif
  return n;
}

}  // namespace

int main() {
  queue q;
  return static_cast<int>(drain(q));
}
