# unlock() reads the lock's own flags after its release store to decide on a wake-up.
set(header hotpath/detail/queued_core.hpp)
set(old_1 [==[        if (sleepers::of(this).load(std::memory_order_relaxed) != 0) [[unlikely]]
          detail::policy_unpark_all<Policy>(word_);]==])
set(new_1 [==[        // The bug this replaced: read the lock's own flags after the release.
        if (flag_bits() & (slow | parked | prio_slow)) detail::policy_unpark_all<Policy>(word_);]==])
