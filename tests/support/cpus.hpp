// SPDX-License-Identifier: MIT
// The cpus a test may move its threads between: examples/common/measure.hpp's.
#pragma once

#include "common/measure.hpp"

namespace hotpath::test {

using measure::allowed_cpus;

}  // namespace hotpath::test
