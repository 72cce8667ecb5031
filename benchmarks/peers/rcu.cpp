// SPDX-License-Identifier: MIT
// RCU read side: hotpath's rcu_domain section and rcu_cell<T>::read() against
// std::shared_mutex in shared mode and std::atomic<std::shared_ptr<T>>::load();
// grace periods: rcu_synchronize(). liburcu's flavours are in urcu_memb.cpp and
// urcu_qsbr.cpp.
#include <memory>
#include <mutex>
#include <shared_mutex>

#include "hotpath/rcu.hpp"
#include "hotpath/rcu_cell.hpp"
#include "rcu_showdown.hpp"

namespace {

using hotpath::showdown::rcu::payload;

struct no_registration {
  static void enter() {}
  static void exit() {}
  static void quiescent() {}
  static void offline() {}
  static void online() {}
};

struct hotpath_domain : no_registration {
  static std::atomic<payload*>& ptr() {
    alignas(hotpath::cache_line_size) static payload obj;
    alignas(hotpath::cache_line_size) static std::atomic<payload*> p{&obj};
    return p;
  }
  static long read() {
    std::scoped_lock r(hotpath::rcu_default_domain());
    // Acquire pairs with the release store that would publish a new object.
    return ptr().load(std::memory_order_acquire)->value;
  }
  static void synchronize() { hotpath::rcu_synchronize(); }
  static void retire(std::atomic<int>* freed) {
    struct counted {
      std::atomic<int>* freed;
      ~counted() { freed->fetch_add(1, std::memory_order_release); }
    };
    hotpath::rcu_retire(new counted{freed});
  }
};

struct hotpath_cell : no_registration {
  static long read() {
    static hotpath::rcu_cell<payload> cell;
    return cell.read()->value;
  }
};

struct shared_mutex_reader : no_registration {
  static long read() {
    alignas(hotpath::cache_line_size) static std::shared_mutex m;
    alignas(hotpath::cache_line_size) static payload obj;
    std::shared_lock l(m);
    return obj.value;
  }
};

struct atomic_shared_ptr_reader : no_registration {
  static long read() {
    alignas(hotpath::cache_line_size) static std::atomic<std::shared_ptr<payload>> p{
        std::make_shared<payload>()};
    return p.load(std::memory_order_acquire)->value;
  }
};

void register_rcu(const hotpath::showdown::options& o) {
  using namespace hotpath::showdown::rcu;
  register_reader<shared_mutex_reader>("std::shared_mutex", o);
  register_reader<atomic_shared_ptr_reader>("std::atomic<std::shared_ptr>", o);
  register_reader<hotpath_domain>("hotpath::rcu_domain", o);
  register_reader<hotpath_cell>("hotpath::rcu_cell", o);
  register_grace<hotpath_domain>("hotpath::rcu_synchronize");
  register_reclaim<hotpath_domain>("hotpath::rcu_retire");
}
HOTPATH_SHOWDOWN(register_rcu);

}  // namespace
