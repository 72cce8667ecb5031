# The reclaimer thread never starts: batches wait for 64 retires or a barrier.
set(header hotpath/detail/rcu_reclaim.hpp)
set(old_1 [==[if (!detail::start_background_thread(&reclaimer_main, this))]==])
set(new_1 [==[if (true)]==])
