// SPDX-License-Identifier: MIT
// percpu_counter's portable path under the deterministic scheduler: every add lands
// exactly once, whichever cpu each step believes it is on (the scheduler picks a cpu
// of two at every current_cpu(), so threads share slots and migrate mid-add).
#include "hotpath/percpu_counter.hpp"

#include <cstdint>

#include "schedule/mutant.hpp"

namespace {

using namespace hotpath::test::sched;

using counter_type = hotpath::percpu_counter<std::int64_t, policy<spin_wait, mutant>>;

// Small deltas and a batch of 3, so that adds both stay in a slot and fold into
// the centre; exact once every thread has finished.
HOTPATH_PROPERTY(exact_sum, {}) {
  counter_type c(5);
  c.set_batch(3);
  static constexpr std::int64_t deltas[3][3] = {{1, 2, -1}, {2, 1, 1}, {-2, 4, 1}};
  run(3, [&](unsigned id) {
    for (std::int64_t d : deltas[id - 1])
      c.add(d);
  });
  std::int64_t expected = 5;
  for (const auto& row : deltas)
    for (std::int64_t d : row)
      expected += d;
  check(c.sum() == expected, "sum() is exact once every add has returned");
  const std::int64_t off = c.read() > expected ? c.read() - expected : expected - c.read();
  check(off <= c.error_bound(), "read() is within error_bound()");
  check(c.read() + c.unfolded().portable == expected, "centre + portable deltas == exact");
}

}  // namespace
