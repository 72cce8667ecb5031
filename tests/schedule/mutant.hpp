// SPDX-License-Identifier: MIT
// The mutant a test program is built as, if any. Mutants that change an operation
// inside a header are switched there by their HOTPATH_MUTANT_<NAME> macro; those
// that drop a fence or a wake-up are switched here, through the scheduler's policy.
// tests/CMakeLists.txt builds each mutant as its own program (docs/testing.md).
#pragma once

#include "support/schedule.hpp"

namespace hotpath::test::sched {

inline constexpr mutations mutant = {
#if defined(HOTPATH_MUTANT_TICKET_SKIP_WAKE) || defined(HOTPATH_MUTANT_MCS_SKIP_WAKE) || \
    defined(HOTPATH_MUTANT_QUEUED_SKIP_WAKE)
    .skip_wake = true,
#endif
#if defined(HOTPATH_MUTANT_TICKET_NO_LIGHT_FENCE) || defined(HOTPATH_MUTANT_RCU_NO_LIGHT_FENCE) || \
    defined(HOTPATH_MUTANT_QUEUED_NO_LIGHT_FENCE)
    .no_light_fence = true,
#endif
#if defined(HOTPATH_MUTANT_TICKET_NO_HEAVY_FENCE) || defined(HOTPATH_MUTANT_RCU_NO_HEAVY_FENCE) || \
    defined(HOTPATH_MUTANT_QUEUED_NO_HEAVY_FENCE)
    .no_heavy_fence = true,
#endif
};

}  // namespace hotpath::test::sched
