# Bytes leaving a share are not counted.
set(header hotpath/bucket_table.hpp)
set(old_1 [==[    if (!shares_ || delta == 0) return;]==])
set(new_1 [==[    if (!shares_ || delta == 0) return;
    // Mutant (tests/bucket_table_eviction_test.cpp): bytes leaving a share are not counted.
    if (delta < 0) return;]==])
