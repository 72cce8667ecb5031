# The bucket with the oldest hint is taken to hold the victim, as if no hint were ever too low.
set(header hotpath/detail/table_eviction.hpp)
set(old_1 [==[      if (next && best && next->oldest >= best->last_used) next = nullptr;]==])
set(new_1 [==[      if (next && best && next->oldest >= best->last_used) next = nullptr;
      // Mutant (tests/bucket_table_eviction_test.cpp): the bucket with the oldest hint holds
      // the victim, as if no hint were ever too low.
      if (best) next = nullptr;]==])
