# The pending owner gives up its place at once.
set(header hotpath/detail/queued_slowpath.hpp)
set(old_1 [==[inline void queued_core<Policy, Requests>::pending_wait() noexcept {]==])
set(new_1 [==[inline void queued_core<Policy, Requests>::pending_wait() noexcept {
  word_.fetch_and(~pending, std::memory_order_relaxed);  // gives up its place at once]==])
