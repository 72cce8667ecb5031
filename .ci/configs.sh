#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Issue 15, "every build configuration works": configure and build the corners of the
# HOTPATH_BUILD_{TESTS,BENCHMARKS,EXAMPLES} options (all off, as a package manager
# builds; each one alone; all on). Unoptimised builds (no CMAKE_BUILD_TYPE): only
# whether they configure and compile is in question, and -O0 compiles fastest. All on
# is only configured here: the dev workflow builds that configuration.
# Usage: .ci/configs.sh [build root, default: a temporary directory]
set -euo pipefail
cd "$(dirname "$0")/.."

root=${1:-}
if [ -z "$root" ]; then
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
fi

corner() {
  local name=$1 tests=$2 benchmarks=$3 examples=$4 build=${5:-build}
  local dir="$root/$name" start=$SECONDS
  cmake -S . -B "$dir" -G Ninja -DHOTPATH_BUILD_TESTS="$tests" \
    -DHOTPATH_BUILD_BENCHMARKS="$benchmarks" -DHOTPATH_BUILD_EXAMPLES="$examples" >"$dir.log" 2>&1 ||
    { cat "$dir.log"; echo "configs: $name does not configure"; return 1; }
  if [ "$build" = build ]; then
    cmake --build "$dir" -j2 >>"$dir.log" 2>&1 ||
      { tail -50 "$dir.log"; echo "configs: $name does not build"; return 1; }
  fi
  echo "configs: $name (tests=$tests benchmarks=$benchmarks examples=$examples) ${build/build/built}" \
    "ok, $((SECONDS - start)) s"
}

corner all-off OFF OFF OFF
corner tests-only ON OFF OFF
corner benchmarks-only OFF ON OFF
corner examples-only OFF OFF ON
corner all-on ON ON ON configure-only

# Without libpcap the examples refuse to configure, naming the package and scripts/setup
# (the library alone still configures: all-off above). /usr hidden from find_* is libpcap
# missing, as on a fresh machine.
dir="$root/no-libpcap"
if cmake -S . -B "$dir" -G Ninja -DHOTPATH_BUILD_TESTS=OFF -DHOTPATH_BUILD_BENCHMARKS=OFF \
  -DHOTPATH_BUILD_EXAMPLES=ON -DCMAKE_IGNORE_PREFIX_PATH=/usr >"$dir.log" 2>&1; then
  cat "$dir.log"
  echo "configs: the examples configured without libpcap"
  exit 1
fi
grep -q "libpcap not found" "$dir.log" && grep -q "scripts/setup" "$dir.log" ||
  { cat "$dir.log"; echo "configs: no libpcap, but the error does not say so"; exit 1; }
echo "configs: no-libpcap refused, naming libpcap and scripts/setup: ok"
