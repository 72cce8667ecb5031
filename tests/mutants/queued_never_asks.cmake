# No bound on a batch: the pending owner or head never asks for the handoff by
# steps (only a sleep would bring it), so a thread that keeps re-taking the lock
# holds it for as long as it likes.
set(header hotpath/detail/queued_slowpath.hpp)
set(old_1 [==[    w.past_bound = (w.steps += gap) == handoff_after;]==])
set(new_1 [==[    w.steps = std::min(w.steps + gap, handoff_after - 1);]==])
