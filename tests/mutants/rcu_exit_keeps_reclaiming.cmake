# The exit handler does not stop the reclaimer: deleters run during static destruction.
set(header hotpath/detail/rcu_reclaim.hpp)
set(old_1 [==[  d.exiting_.store(true, std::memory_order_seq_cst);
  d.stop_.store(true, std::memory_order_relaxed);]==])
set(new_1 [==[]==])
