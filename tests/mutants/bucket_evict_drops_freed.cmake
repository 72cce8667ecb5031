# What evictions freed beyond the charge, or before a refusal, is never given back.
set(header hotpath/detail/table_eviction.hpp)
set(old_1 [==[      budget_.give_back(freed - delta);
]==])
set(new_1 [==[]==])
set(old_2 [==[      budget_.give_back(freed);
      return false;]==])
set(new_2 [==[      return false;]==])
