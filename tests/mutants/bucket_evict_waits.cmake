# Eviction waits for a sampled bucket's lock while holding its own: a deadlock.
set(header hotpath/detail/table_eviction.hpp)
set(old_1 [==[    if (!own && !b.lock.try_lock()) {  // busy: being visited, so fresh; sample another
      *next = s[--have];
      draw();
      continue;
    }]==])
set(new_1 [==[    // Mutant: waits for a sampled bucket's lock while holding held's (deadlock).
    if (!own) b.lock.lock();]==])
