# Every eviction samples the whole table, never the share's own buckets.
set(header hotpath/detail/table_eviction.hpp)
set(old_1 [==[    if (shares_[q].bytes.load(std::memory_order_relaxed) >= share_floor_) {]==])
set(new_1 [==[    // Mutant (tests/bucket_table_eviction_test.cpp): every eviction samples the whole table.
    if (false) {]==])
