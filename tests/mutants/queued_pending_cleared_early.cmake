# The pending owner gives up its place at once.
set(header hotpath/queued_lock.hpp)
set(old_1 [==[  void pending_wait() noexcept {]==])
set(new_1 [==[  void pending_wait() noexcept {
    word_.fetch_and(~pending, std::memory_order_relaxed);  // gives up its place at once]==])
