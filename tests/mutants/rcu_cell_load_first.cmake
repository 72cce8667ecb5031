# rcu_cell's guard reads the pointer before its read-side section begins.
set(header hotpath/rcu_cell.hpp)
set(old_1 [==[      dom_.lock();
      // Acquire pairs with the release exchange in publish(): the T is constructed.
      p_ = c.ptr_.load(std::memory_order_acquire);]==])
set(new_1 [==[      p_ = c.ptr_.load(std::memory_order_acquire);
      dom_.lock();]==])
