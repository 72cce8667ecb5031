#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the defrag fuzzer with clang (libFuzzer + ASan + UBSan), seeds it from the
# shipped capture and runs it for SECONDS (default 60). Exit status non-zero on a finding.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
build=build/fuzz
CXX=${CXX_FUZZ:-clang++} cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHOTPATH_BUILD_FUZZERS=ON -DHOTPATH_BUILD_TESTS=OFF -DHOTPATH_BUILD_BENCHMARKS=OFF \
  -DHOTPATH_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" --target defrag_fuzz defrag_fuzz_seeds
mkdir -p "$build/corpus"
"$build/tests/fuzz/defrag_fuzz_seeds" tests/data/defrag/kernel-seed1.pcapng "$build/corpus"
"$build/tests/fuzz/defrag_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len=16384 -print_final_stats=1 "$build/corpus"
