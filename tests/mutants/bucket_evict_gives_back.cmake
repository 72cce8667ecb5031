# What an eviction freed goes back to a reserve, where another charger may gather it first.
set(header hotpath/detail/table_eviction.hpp)
set(old_1 [==[    gather = freed == before || attempt + 1 == opt_.eviction_attempts;]==])
set(new_1 [==[    gather = freed == before || attempt + 1 == opt_.eviction_attempts;
    // Mutant (tests/schedule/bucket_table.cpp): what an eviction freed goes back to a
    // reserve, where another charger may gather it before this one takes it.
    budget_.give_back(freed);
    freed = 0;]==])
