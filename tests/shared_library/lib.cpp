// SPDX-License-Identifier: MIT
// Built twice (HOTPATH_TEST_LIB = a, b) as a shared library with hidden visibility:
// each copy instantiates hotpath's headers on its own, as two independent libraries
// of one program would.
#include <atomic>

#include "hotpath/queued_lock.hpp"
#include "hotpath/rcu.hpp"
#include "hotpath/rcu_cell.hpp"
#include "shared_library/api.hpp"

namespace {

using hotpath::test::shared_library::api;
using hotpath::test::shared_library::tracked;

struct counted : tracked {
  counted(std::atomic<int>* d) { destroyed = d; }
  counted(const counted&) = delete;
  ~counted() {
    magic = 0;
    destroyed->fetch_add(1, std::memory_order_relaxed);
  }
};
using cell = hotpath::rcu_cell<counted>;

const api table = {
    [](hotpath::queued_lock& l) { l.lock(); },
    [](hotpath::queued_lock& l) { l.unlock(); },
    [](void (*during)(void*), void* arg) {
      std::scoped_lock r(hotpath::rcu_default_domain());
      during(arg);
    },
    [] { hotpath::rcu_synchronize(); },
    [] { hotpath::rcu_barrier(); },
    [](std::atomic<int>* d) -> void* { return new cell(std::make_unique<counted>(d)); },
    [](void* c, std::atomic<int>* d) {
      static_cast<cell*>(c)->store(std::make_unique<counted>(d));
    },
    [](void* c, void (*during)(void*), void* arg) {
      auto g = static_cast<cell*>(c)->read();
      during(arg);
      return g->magic;
    },
    [](void* c) { delete static_cast<cell*>(c); },
};

}  // namespace

#define HOTPATH_TEST_CAT2(a, b) a##b
#define HOTPATH_TEST_CAT(a, b) HOTPATH_TEST_CAT2(a, b)
extern "C" const api* HOTPATH_TEST_CAT(hotpath_test_lib_, HOTPATH_TEST_LIB)() {
  return &table;
}
