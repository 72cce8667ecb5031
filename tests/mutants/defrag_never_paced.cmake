# Workers never keep within the window, even when memory is short: one far ahead evicts, under a flood, datagrams a slower one is still completing.
set(root examples/defrag)
set(header engine.hpp)
set(old_1 [==[    return table_.pool_bytes() < table_.budget() - table_.budget() / 4;]==])
set(new_1 [==[    return false;  // mutant: memory is never short, so workers are never paced]==])
