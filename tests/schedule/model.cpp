// SPDX-License-Identifier: MIT
// Litmus tests of the schedule model itself (tests/support/schedule.hpp): what each
// store model admits and what it forbids. Each property fails (sched::fail) when it
// observes its outcome; tests/CMakeLists.txt runs it with every seed in one model and
// expects either a failure (--expect-caught: the model admits the outcome) or none
// (the model forbids it, over 100,000 seeds).
#include <atomic>

#include "support/schedule.hpp"

namespace {

using namespace hotpath::test::sched;
constexpr auto relaxed = std::memory_order_relaxed;

// Message passing: a writer stores the data, then publishes it through a flag (after a
// release fence if `fence`); a reader that sees the flag must see the data. With a
// store (mp_*): relaxed, the weak model admits the stale data (the flag's store lands
// first); TSO never does. With an RMW (rmw_*): a relaxed or acquire RMW does not wait
// for the stores before it in the weak model (x86's locked instruction does); a
// release one does, and so does any RMW after a release fence.
void message_passing(std::memory_order publish, bool fence, bool rmw) {
  atomic<int> data{0}, flag{0};
  run({[&] {
         data.store(1, relaxed);
         if (fence) hotpath::test::sched::fence(std::memory_order_release);
         if (rmw) {
           flag.fetch_add(1, publish);
         } else {
           flag.store(1, publish);
         }
       },
       [&] {
         if (flag.load(std::memory_order_acquire) == 1 && data.load(relaxed) == 0)
           fail(rmw ? "saw the RMW before the store that precedes it"
                    : "saw the flag before the data it publishes");
       }});
}

HOTPATH_PROPERTY(mp_relaxed, {}) {
  message_passing(relaxed, false, false);
}
HOTPATH_PROPERTY(mp_release, {}) {
  message_passing(std::memory_order_release, false, false);
}
HOTPATH_PROPERTY(mp_release_fence, {}) {
  message_passing(relaxed, true, false);
}
HOTPATH_PROPERTY(rmw_relaxed, {}) {
  message_passing(relaxed, false, true);
}
HOTPATH_PROPERTY(rmw_acquire, {}) {
  message_passing(std::memory_order_acquire, false, true);
}
HOTPATH_PROPERTY(rmw_release_fence, {}) {
  message_passing(relaxed, true, true);
}
HOTPATH_PROPERTY(rmw_release, {}) {
  message_passing(std::memory_order_release, false, true);
}

// Coherence: two relaxed stores to one word are seen in their order by everyone, and
// a thread's RMW acts on its own older store to the word (which lands first, or the
// RMW reads memory without it and y ends at 1: the check after run()). Violations
// are forbidden in both models.
HOTPATH_PROPERTY(coherence, {}) {
  atomic<int> x{0}, y{0};
  run({[&] {
         x.store(1, relaxed);
         x.store(2, relaxed);
         y.store(1, relaxed);
         y.fetch_add(1, relaxed);
       },
       [&] {
         const int a = x.load(relaxed);
         const int b = x.load(relaxed);
         if (a == 2 && b == 1) fail("saw x's stores out of their order");
       }});
  check(x.load(relaxed) == 2, "the last store wins");
  check(y.load(relaxed) == 2, "the RMW acted on its thread's older store");
}

// A handoff lost: the owner initialises its word and publishes that it has (`publish`
// order); a receiver that sees the publication hands over by writing into the word.
// The weak model admits the initialisation landing after the handoff, which then is
// lost (what a queue lock's release publish of its node prevents); TSO does not.
void handoff(std::memory_order publish) {
  atomic<int> word{-1}, published{0};
  bool handed = false;  // plain: touched by the receiver only, read after run()
  run({[&] {
         word.store(0, relaxed);
         published.store(1, publish);
       },
       [&] {
         if (published.load(std::memory_order_acquire) == 1) {
           word.store(1, relaxed);
           handed = true;
         }
       }});
  if (handed && word.load(relaxed) != 1) fail("the handoff was overwritten by the initialisation");
}

HOTPATH_PROPERTY(handoff_relaxed, {}) {
  handoff(relaxed);
}
HOTPATH_PROPERTY(handoff_release, {}) {
  handoff(std::memory_order_release);
}

}  // namespace
