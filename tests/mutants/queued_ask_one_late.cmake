# The pending owner or head asks for the handoff one relax() step after its bound.
set(header hotpath/detail/queued_slowpath.hpp)
set(old_1 [==[    gap = std::min({2u + w.steps, poll_gap_max, handoff_after - w.steps});
    w.past_bound = (w.steps += gap) == handoff_after;]==])
set(new_1 [==[    gap = std::min({2u + w.steps, poll_gap_max, handoff_after + 1 - w.steps});
    w.past_bound = (w.steps += gap) == handoff_after + 1;]==])
