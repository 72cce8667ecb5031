# A retire that brings the backlog to exactly its limit already reclaims first.
set(header hotpath/detail/rcu_reclaim.hpp)
set(old_1 [==[bytes > limit - std::min(held, limit)]==])
set(new_1 [==[bytes >= limit - std::min(held, limit)]==])
