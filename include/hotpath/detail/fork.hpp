// SPDX-License-Identifier: MIT
// fork() in a multithreaded program: only the forking thread lives on in the child.
// hotpath's process-wide state registers handlers as liburcu does: before the fork,
// take its mutexes, so that none is held in the child by a thread that is not there;
// after it, release them in the parent; in the child, release them and forget every
// other thread (its RCU reader word, its thread slot). What the user's threads held
// at the fork (a queued_lock, a queue position, an rcu_cell's writer mutex) stays
// held in the child, as any mutex does.
#pragma once

#include "hotpath/detail/config.hpp"

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#define HOTPATH_HAS_FORK 1
#else
#define HOTPATH_HAS_FORK 0
#endif

HOTPATH_VISIBILITY_BEGIN
namespace hotpath::detail {

// Registers the three handlers (once per caller: call it where the state is made).
inline void at_fork(void (*prepare)(), void (*parent)(), void (*child)()) noexcept {
#if HOTPATH_HAS_FORK
  (void)pthread_atfork(prepare, parent, child);
#else
  (void)prepare;
  (void)parent;
  (void)child;
#endif
}

}  // namespace hotpath::detail
HOTPATH_VISIBILITY_END
