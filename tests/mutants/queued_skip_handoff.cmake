# unlock()'s check before its plain store forgets the handoff flag.
set(header hotpath/detail/queued_core.hpp)
set(old_1 [==[  static constexpr std::uint32_t unlock_check_flags = unlock_flags;]==])
set(new_1 [==[  static constexpr std::uint32_t unlock_check_flags = unlock_flags & ~handoff;]==])
