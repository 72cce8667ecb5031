// SPDX-License-Identifier: MIT
// RCU's reclaimer thread and the end of a process (rcu.hpp, docs/rcu.md): each
// case runs in a child forked from this single-threaded program, so that the child
// is a whole process of its own that exits as programs do (atexit handlers, static
// destructors, LeakSanitizer's check under the asan preset).
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "hotpath/rcu.hpp"
#include "support/process.hpp"

namespace hotpath::test {
namespace {

using namespace std::chrono_literals;

// Runs body() in a child that then calls exit(0); returns wait_child()'s status.
template <class F>
int in_child(F body) {
  const pid_t pid = fork();
  if (pid == 0) {
    body();
    std::exit(0);
  }
  return wait_child(pid);
}

// Set by a static's destructor: from then on no deleter may run.
std::atomic<bool> statics_destroyed{false};
std::atomic<bool> release_reader{false};

struct checked {
  ~checked() {
    if (statics_destroyed.load()) {
      static const char msg[] = "a deleter ran after static destruction began\n";
      (void)!write(2, msg, sizeof msg - 1);
      _exit(3);
    }
  }
};

// A static built before the first retire: destroyed after the domain's exit
// handler. Its destructor lets the reader go and gives a reclaimer that was not
// stopped time to run the batch the reader held.
struct canary {
  ~canary() {
    statics_destroyed.store(true);
    release_reader.store(true);
    std::this_thread::sleep_for(100ms);
  }
};

// Exit with a backlog a reader holds: no deleter runs once static destruction has
// begun, and under LeakSanitizer nothing is reported (what is pending stays
// reachable from the domain).
TEST(RcuExit, ExitWithAPendingBacklog) {
  EXPECT_EQ(in_child([] {
              static canary c;
              std::atomic<bool> inside{false};
              std::thread([&inside] {
                std::scoped_lock r(rcu_default_domain());
                inside.store(true);
                while (!release_reader.load())
                  std::this_thread::sleep_for(1ms);
              }).detach();
              while (!inside.load())
                std::this_thread::sleep_for(1ms);
              for (int i = 0; i < 100; ++i)
                rcu_retire(new checked);
              if (!rcu_default_domain().reclaimer_running()) _exit(4);
              std::this_thread::sleep_for(10ms);  // its grace period waits for the reader
            }),
            0);
}

// A program that must not have a thread started behind its back: refused before
// the first retire, none is; batches still close by size; the barrier frees the rest.
TEST(RcuExit, RefusedBeforeTheFirstRetireNoThreadIsStarted) {
  EXPECT_EQ(in_child([] {
              static std::atomic<int> alive{0};
              struct obj {
                obj() { alive.fetch_add(1); }
                ~obj() { alive.fetch_sub(1); }
              };
              const int before = threads_now();  // 1, or 2 with a sanitizer's own
              if (before < 1) _exit(2);
              rcu_default_domain().set_reclaimer_thread(false);
              for (std::size_t i = 0; i < 10 * rcu_domain::batch_size + 3; ++i)
                rcu_retire(new obj);
              if (threads_now() != before || rcu_default_domain().reclaimer_running()) _exit(3);
              if (alive.load() > static_cast<int>(rcu_domain::batch_size)) _exit(4);
              rcu_barrier();
              if (alive.load() != 0) _exit(5);
            }),
            0);
}

}  // namespace
}  // namespace hotpath::test
