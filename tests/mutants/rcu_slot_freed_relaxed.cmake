# An exiting reader gives its slot back with a relaxed store: the thread that claims
# the slot next is not ordered after the exiting one's sections (a data race in either
# store model), and in the weak model `in_use = false` may also land before `ctr = 0`.
set(header hotpath/rcu.hpp)
set(old_1 [==[      s.rec->in_use.store(false, std::memory_order_release);  // read by claim_slot()]==])
set(new_1 [==[      s.rec->in_use.store(false, std::memory_order_relaxed);  // read by claim_slot()]==])
