// SPDX-License-Identifier: MIT
// liburcu's memb flavour (membarrier-based, the one hotpath's rcu_domain follows),
// read side inlined with _LGPL_SOURCE: its best case.
#define _LGPL_SOURCE
#include <urcu/urcu-memb.h>

#include "rcu_showdown.hpp"

namespace {

using hotpath::showdown::rcu::payload;

struct urcu_memb {
  static void enter() { urcu_memb_register_thread(); }
  static void exit() { urcu_memb_unregister_thread(); }
  static void quiescent() {}
  static void offline() {}
  static void online() {}
  static long read() {
    alignas(hotpath::cache_line_size) static payload obj;
    alignas(hotpath::cache_line_size) static std::atomic<payload*> p{&obj};
    urcu_memb_read_lock();
    // Acquire pairs with the release store that would publish a new object.
    const long v = p.load(std::memory_order_acquire)->value;
    urcu_memb_read_unlock();
    return v;
  }
  static void synchronize() { urcu_memb_synchronize_rcu(); }
  static void retire(std::atomic<int>* freed) {
    struct counted {
      rcu_head head;
      std::atomic<int>* freed;
    };
    auto* c = new counted{{}, freed};
    urcu_memb_call_rcu(&c->head, [](rcu_head* h) {
      counted* self = caa_container_of(h, counted, head);
      self->freed->fetch_add(1, std::memory_order_release);
      delete self;
    });
  }
};

void register_urcu_memb(const hotpath::showdown::options& o) {
  using namespace hotpath::showdown::rcu;
  register_reader<urcu_memb>("liburcu-memb", o);
  register_grace<urcu_memb>("liburcu-memb");
  register_reclaim<urcu_memb>("liburcu-memb call_rcu");
}
HOTPATH_SHOWDOWN(register_urcu_memb);

}  // namespace
