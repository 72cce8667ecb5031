# The retire that finds the list empty does not wake the sleeping reclaimer.
set(header hotpath/detail/rcu_reclaim.hpp)
set(old_1 [==[    detail::unpark_all(sleeping_);]==])
set(new_1 [==[    (void)0;]==])
