# A share whose own entries give nothing does not evict elsewhere.
set(header hotpath/detail/table_eviction.hpp)
set(old_1 [==[    // Its share held nothing to take (its entries busy, or only this one): the whole
    // table, in the same attempt.
    if (within && freed == before) evict(held, protect, now, rl, freed, false);]==])
set(new_1 [==[    (void)within;]==])
