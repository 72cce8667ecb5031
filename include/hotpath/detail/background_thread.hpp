// SPDX-License-Identifier: MIT
// A thread hotpath starts for itself (RCU's reclaimer), detached: whoever stops it
// waits for a word it sets as it returns, not with a join, so that a process may
// exit with it running. Started with every signal blocked, as liburcu starts its
// call_rcu threads: a signal sent to the process is delivered to one of the
// program's own threads, never to ours, whose code does not expect it.
// pthread_create() rather than std::thread: it allocates nothing through operator
// new (a failure is a return value, not an exception).
#pragma once

#include "hotpath/detail/config.hpp"

#if defined(__unix__)
#include <pthread.h>
#include <signal.h>
#define HOTPATH_HAS_BACKGROUND_THREAD 1
#else
#define HOTPATH_HAS_BACKGROUND_THREAD 0
#endif

HOTPATH_VISIBILITY_BEGIN
namespace hotpath::detail {

// Runs body(arg) on a new, detached thread. False if no thread could be started.
inline bool start_background_thread(void* (*body)(void*), void* arg) noexcept {
#if HOTPATH_HAS_BACKGROUND_THREAD
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);  // inherited by the new thread
  pthread_t id;
  const bool ok = pthread_create(&id, nullptr, body, arg) == 0;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (ok) pthread_detach(id);
  return ok;
#else
  (void)body;
  (void)arg;
  return false;
#endif
}

}  // namespace hotpath::detail
HOTPATH_VISIBILITY_END
