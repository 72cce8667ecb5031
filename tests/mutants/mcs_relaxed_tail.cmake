# The tail exchange and the link store that enqueue a waiter are relaxed.
set(header hotpath/mcs_lock.hpp)
set(old_1 [==[  static constexpr auto enqueue_order = std::memory_order_acq_rel;
  static constexpr auto link_order = std::memory_order_release;]==])
set(new_1 [==[  static constexpr auto enqueue_order = std::memory_order_relaxed;
  static constexpr auto link_order = std::memory_order_relaxed;]==])
