# A gathered part stays on this cpu: two chargers that split the room both fail.
set(header hotpath/detail/table_budget.hpp)
set(old_1 [==[    if (got > 0) free_.fetch_add(got, std::memory_order_relaxed);
    return take_shared(d, 0);]==])
set(new_1 [==[    // Mutant (tests/schedule/bucket_table.cpp): the part stays on this cpu; two
    // chargers that split the room both fail.
    give_back(got);
    return false;]==])
