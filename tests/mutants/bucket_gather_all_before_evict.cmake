# Every reserve is gathered before evicting.
set(header hotpath/detail/table_eviction.hpp)
set(old_1 [==[  bool gather = opt_.eviction_attempts == 0;]==])
set(new_1 [==[  // Mutant (tests/bucket_table_eviction_test.cpp): every reserve is gathered before evicting.
  bool gather = true;]==])
set(old_2 [==[    gather = freed == before || attempt + 1 == opt_.eviction_attempts;]==])
set(new_2 [==[    gather = freed == before || attempt + 1 == opt_.eviction_attempts;
    gather = true;]==])
