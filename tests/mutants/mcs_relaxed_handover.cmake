# The handover store that passes the lock to the successor is relaxed.
set(header hotpath/mcs_lock.hpp)
set(old_1 [==[  static constexpr auto handover_order = std::memory_order_release;]==])
set(new_1 [==[  static constexpr auto handover_order = std::memory_order_relaxed;]==])
