# A load and a store where taking from a per-cpu reserve needs a CAS: two chargers on one cpu take the same bytes.
set(header hotpath/detail/table_budget.hpp)
set(old_1 [==[    while (x >= d)
      if (mine.compare_exchange_weak(x, x - d, std::memory_order_relaxed)) return true;]==])
set(new_1 [==[    // Mutant (tests/schedule/bucket_table.cpp): a load and a store where the CAS must
    // be; two chargers on one cpu take the same bytes.
    if (x >= d) {
      mine.store(x - d, std::memory_order_relaxed);
      return true;
    }]==])
