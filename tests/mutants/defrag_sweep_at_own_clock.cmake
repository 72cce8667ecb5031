# A worker sweeps at its own capture time, not the slowest worker's: running ahead, it expires a datagram whose owner has yet to bring its last fragment in time.
set(root examples/defrag)
set(header worker.hpp)
set(old_1 [==[  const std::int64_t low = low_watermark(s, me, now);]==])
set(new_1 [==[  const std::int64_t low = ((void)me, now);  // mutant: its own clock, not the watermark]==])
