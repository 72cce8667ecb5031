#!/bin/sh
# SPDX-License-Identifier: MIT
# queued_lock's unlock, three ways, in one benchmark program (docs/locks.md):
#   queued_lock          the tree's: a release store, then a sleeper-table load
#   queued_lock@before   the header at REV (default 802070c, before the table): a release
#                        store, then a load of the lock's own flag byte (the bug)
#   queued_lock@rmw      the tree's with every unlock() through unlock_slow(): one word
#                        CAS that releases and sees the sleeper flags (the kernel's pv way)
#   queued_lock@xchg     the tree's with the release store made a byte exchange: the
#                        cost of a locked instruction on the byte alone (the kernel's pv
#                        unlock is a byte cmpxchg), not a complete algorithm
# beside std::mutex and test-and-set. The two variants are renamed copies made here,
# in a scratch directory; they are not kept in the tree.
# Usage: benchmarks/unlock_variants.sh [REV] [benchmark args...]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
rev=${1:-802070c}
[ $# -gt 0 ] && shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rename() {  # $1: suffix
  sed -e "s/queued_core/queued_core_$1/g" -e "s/basic_queued_lock/basic_queued_lock_$1/g" \
      -e "s/sleeper_table/sleeper_table_$1/g" -e "s/using queued_lock =/using queued_lock_$1 =/"
}
# The tree's lock as one text: its core and slow path (detail/) before the public class.
tree() {
  cat "$root/include/hotpath/detail/queued_core.hpp" \
      "$root/include/hotpath/detail/queued_slowpath.hpp" "$root/include/hotpath/queued_lock.hpp" |
    grep -v -e '^#pragma once' -e '^#include "hotpath/detail/queued_\(core\|slowpath\).hpp"'
}
git -C "$root" show "$rev:include/hotpath/queued_lock.hpp" | rename before >"$work/before.hpp"
tree | rename rmw |
  sed 's/if (flag_bits() \& unlock_check_flags) \[\[unlikely\]\]/if (true)/' >"$work/rmw.hpp"
tree | rename xchg |
  sed 's/__atomic_store_n(byte_at(0), std::uint8_t{0}, __ATOMIC_RELEASE)/(void)__atomic_exchange_n(byte_at(0), std::uint8_t{0}, __ATOMIC_RELEASE)/' >"$work/xchg.hpp"
grep -q 'if (true)' "$work/rmw.hpp" && grep -q '__atomic_exchange_n(byte_at(0)' "$work/xchg.hpp" ||
  { echo "a variant's edit did not apply" >&2; exit 1; }
cat >"$work/main.cpp" <<'CPP'
#include <mutex>
#include "hotpath/queued_lock.hpp"
#include "before.hpp"
#include "rmw.hpp"
#include "xchg.hpp"
#include "support/lock_bench.hpp"
HOTPATH_LOCK_BENCHMARKS("std::mutex", std::mutex);
HOTPATH_LOCK_BENCHMARKS("tas", hotpath::bench::tas_lock);
HOTPATH_LOCK_BENCHMARKS("queued_lock", hotpath::queued_lock);
HOTPATH_LOCK_BENCHMARKS("queued_lock@before", hotpath::queued_lock_before);
HOTPATH_LOCK_BENCHMARKS("queued_lock@rmw", hotpath::queued_lock_rmw);
HOTPATH_LOCK_BENCHMARKS("queued_lock@xchg", hotpath::queued_lock_xchg);
CPP
${CXX:-c++} -std=c++20 -O3 -DNDEBUG -I"$root/include" -I"$root/benchmarks" -I"$root/examples" -I"$work" \
  "$work/main.cpp" -o "$work/variants" -lbenchmark -lbenchmark_main -lpthread
"$work/variants" "$@"
