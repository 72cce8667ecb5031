# The tail exchange keeps its acquire but loses its release: n's initialisation is
# not published to the successor that links behind it (its link into n.next can be
# overwritten by n's own `next = nullptr`, still buffered). TSO hides it (an RMW
# drains the store buffer); the weak model does not.
set(header hotpath/mcs_lock.hpp)
set(old_1 [==[  static constexpr auto enqueue_order = std::memory_order_acq_rel;]==])
set(new_1 [==[  static constexpr auto enqueue_order = std::memory_order_acquire;]==])
