# The tail swap keeps its acquire but loses its release: the node's initialisation
# is not published to the successor that decodes the tail (its link into me.next can
# be overwritten by our own `next = nullptr`, still buffered). Caught in the weak
# model only: under TSO an RMW drains the store buffer.
set(header hotpath/detail/queued_slowpath.hpp)
set(old_1 [==[(old & ~tail_mask) | my_tail, std::memory_order_acq_rel,]==])
set(new_1 [==[(old & ~tail_mask) | my_tail, std::memory_order_acquire,]==])
