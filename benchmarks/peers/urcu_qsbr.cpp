// SPDX-License-Identifier: MIT
// liburcu's qsbr flavour (quiescent-state based: read-side sections are empty, each
// reader announces a quiescent state every 256 reads), inlined with _LGPL_SOURCE.
#define _LGPL_SOURCE
#include <urcu/urcu-qsbr.h>

#include "rcu_showdown.hpp"

namespace {

using hotpath::showdown::rcu::payload;

struct urcu_qsbr {
  static void enter() { urcu_qsbr_register_thread(); }
  static void exit() { urcu_qsbr_unregister_thread(); }
  static void quiescent() { urcu_qsbr_quiescent_state(); }
  // An idle QSBR reader must go offline, or every grace period waits for it.
  static void offline() { urcu_qsbr_thread_offline(); }
  static void online() { urcu_qsbr_thread_online(); }
  static long read() {
    alignas(hotpath::cache_line_size) static payload obj;
    alignas(hotpath::cache_line_size) static std::atomic<payload*> p{&obj};
    urcu_qsbr_read_lock();
    // Acquire pairs with the release store that would publish a new object.
    const long v = p.load(std::memory_order_acquire)->value;
    urcu_qsbr_read_unlock();
    return v;
  }
  static void synchronize() { urcu_qsbr_synchronize_rcu(); }
};

void register_urcu_qsbr(const hotpath::showdown::options& o) {
  using namespace hotpath::showdown::rcu;
  register_reader<urcu_qsbr>("liburcu-qsbr", o);
  register_grace<urcu_qsbr>("liburcu-qsbr");
}
HOTPATH_SHOWDOWN(register_urcu_qsbr);

}  // namespace
