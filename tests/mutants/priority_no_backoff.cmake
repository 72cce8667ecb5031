# A stealer that finds a privileged request after its CAS keeps the lock.
set(header hotpath/detail/queued_core.hpp)
set(old_1 [==[        if (flag_bits() & request) [[unlikely]] {
          unlock();
          return false;
        }]==])
set(new_1 [==[]==])
