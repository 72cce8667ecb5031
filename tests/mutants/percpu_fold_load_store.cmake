# A load and a store where folding a per-cpu word into the centre needs a CAS.
set(header hotpath/percpu_counter.hpp)
set(old_1 [==[    // through the join's happens-before.]==])
set(new_1 [==[    // through the join's happens-before.
    // Test-only bug for tests/schedule/: a load and a store where the CAS must be.
    const std::int64_t sum = detail::wrapping_add(w.load(std::memory_order_relaxed), d);
    if (!detail::beyond(sum, batch)) {
      w.store(sum, std::memory_order_relaxed);
    } else {
      w.store(0, std::memory_order_relaxed);
      count_.fetch_add(static_cast<T>(sum), std::memory_order_relaxed);
    }
    return;]==])
