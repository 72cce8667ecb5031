# Each index of a draw shifts one bit instead of index_bits: consecutive indices share
# all but one of their bits, so eviction samples neighbours of one random walk.
set(header hotpath/detail/table_sampler.hpp)
set(old_1 [==[      r_ >>= bits_;  // bits_ < 64: the table has 2^bits_ buckets]==])
set(new_1 [==[      r_ >>= 1;  // Mutant (tests/table_sampler_test.cpp): reuses bits_ - 1 bits]==])
