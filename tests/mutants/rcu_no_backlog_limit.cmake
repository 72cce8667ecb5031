# A retire never finds the backlog over its byte limit.
set(header hotpath/detail/rcu_reclaim.hpp)
set(old_1 [==[bytes > limit - std::min(held, limit)]==])
set(new_1 [==[bytes > limit - std::min(held, limit) && false]==])
