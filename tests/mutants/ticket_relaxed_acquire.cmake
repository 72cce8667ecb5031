# Entering on one's ticket is a relaxed load.
set(header hotpath/ticket_lock.hpp)
set(old_1 [==[  static constexpr auto entry_order = std::memory_order_acquire;]==])
set(new_1 [==[  static constexpr auto entry_order = std::memory_order_relaxed;]==])
