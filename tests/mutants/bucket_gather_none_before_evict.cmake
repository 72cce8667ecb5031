# No reserve is gathered before evicting, not even the thread's own on a cpu it left.
set(header hotpath/detail/table_budget.hpp)
set(old_1 [==[    for (reserve& r : reserves_) {]==])
set(new_1 [==[    for (reserve& r : reserves_) {
      // Mutant (tests/bucket_table_eviction_test.cpp): before evicting, no reserve is gathered,
      // not even one this thread left on a cpu it ran on before.
      if (!all) continue;]==])
