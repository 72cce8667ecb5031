# The store that ends a read-side section is relaxed.
set(header hotpath/rcu.hpp)
set(old_1 [==[    // passed(), which then frees what we read.
    s.rec->ctr.store(0, std::memory_order_release);]==])
set(new_1 [==[    // passed(), which then frees what we read.
    s.rec->ctr.store(0, std::memory_order_relaxed);]==])
