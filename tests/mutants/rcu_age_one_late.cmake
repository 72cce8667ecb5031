# Without a reclaimer, a batch closes one nanosecond after max_batch_age.
set(header hotpath/detail/rcu_reclaim.hpp)
set(old_1 [==[return now - pending_since_.load(std::memory_order_relaxed) >= age_ns]==])
set(new_1 [==[return now - pending_since_.load(std::memory_order_relaxed) > age_ns]==])
