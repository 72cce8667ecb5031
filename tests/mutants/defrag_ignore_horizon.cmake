# An owner takes its next packet without waiting for every other worker to have steered past it: a first fragment still to be handed over comes after a later fragment of its datagram.
set(root examples/defrag)
set(header worker.hpp)
set(old_1 [==[    if (x != none && x < horizon && (x == y || p < r)) {]==])
set(new_1 [==[    if (x != none && (x == y || p < r)) {  // mutant: the horizon ignored]==])
# Without the assertion that each worker takes its packets in capture order, so that the tests' own checks must see it.
set(old_2 [==[    assert(i >= next);]==])
set(new_2 [==[    // mutant: assert(i >= next) left out]==])
