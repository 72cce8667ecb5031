# An entry's times move back, its bucket's eviction hint does not.
set(header hotpath/bucket_table.hpp)
set(old_1 [==[    if (t < hint.load(std::memory_order_relaxed)) hint.store(t, std::memory_order_relaxed);]==])
set(new_1 [==[    // Mutant (tests/bucket_table_eviction_test.cpp): an entry's times move back, its hint not.
    (void)hint, (void)t;]==])
