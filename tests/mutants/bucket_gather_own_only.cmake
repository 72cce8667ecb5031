# Other cpus' spare bytes are never gathered.
set(header hotpath/detail/table_budget.hpp)
set(old_1 [==[      if (!all && &r != here && r.depositor.load(std::memory_order_relaxed) != me) continue;]==])
set(new_1 [==[      if (!all && &r != here && r.depositor.load(std::memory_order_relaxed) != me) continue;
      // Mutant (tests/bucket_table_eviction_test.cpp): other cpus' spare bytes are not gathered.
      if (&r.bytes != &local_reserve()) continue;]==])
