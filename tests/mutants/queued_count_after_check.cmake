# A sleeper counts itself after it checked the word: unlock() may have looked already.
set(header hotpath/detail/queued_slowpath.hpp)
set(old_1 [==[  counted.fetch_add(1, std::memory_order_relaxed);]==])
set(new_1 [==[]==])
set(old_2 [==[  const std::uint32_t val = word_.load(std::memory_order_relaxed);]==])
set(new_2 [==[  const std::uint32_t val = word_.load(std::memory_order_relaxed);
  counted.fetch_add(1, std::memory_order_relaxed);  // too late: unlock() may have looked]==])
