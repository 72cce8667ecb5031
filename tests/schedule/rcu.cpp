// SPDX-License-Identifier: MIT
// rcu_domain and rcu_cell under the deterministic scheduler: no reader ever reads an
// object after the grace period that let it be freed, with the fence pair modelled
// both ways (membarrier, or seq_cst fences) and readers' stores held in store buffers.
#include <memory>
#include <mutex>

#include "hotpath/rcu.hpp"
#include "hotpath/rcu_cell.hpp"
#include "schedule/mutant.hpp"

namespace {

using namespace hotpath::test::sched;

// Readers never park: a grace period spins (each spin a scheduling point).
using rcu_policy = policy<spin_wait, mutant>;
using domain = hotpath::basic_rcu_domain<rcu_policy>;

// An object readers reach through a pointer; its memory outlives the seed, so a
// read after its destruction is reported rather than undefined.
struct object : graveyard_object {
  explicit object(int v) : value(v), check_value(-v) {}
  data<int> value;
  data<int> check_value;
};

void read_object(const object* p) {
  const int v = p->value.read();
  yield_point();
  check(p->check_value.read() == -v, "an object is read whole");
}

// The domain outlives the seeds. Give it, once, the two reader slots that the
// properties' two readers can ever hold at once, so that every seed starts from the
// same state (no seed allocates a slot) and reruns alone exactly as it ran in turn.
domain& prepared_domain() {
  static const bool prepared = [] {
    setup([] {
      domain& dom = domain::instance();
      atomic<int> inside(0);
      auto hold = [&] {
        std::scoped_lock section(dom);
        inside.fetch_add(1, std::memory_order_relaxed);
        while (inside.load(std::memory_order_relaxed) < 2)
          (void)spin();
      };
      run({hold, hold});
    });
    return true;
  }();
  (void)prepared;
  return domain::instance();
}

// A reader: `sections` read-side sections, each reading the object behind `ptr` whole.
auto reader_of(domain& dom, atomic<object*>& ptr, int sections) {
  return [&dom, &ptr, sections] {
    for (int r = 0; r < sections; ++r) {
      std::scoped_lock section(dom);
      // Acquire pairs with the writer's exchange: the object is constructed.
      read_object(ptr.load(std::memory_order_acquire));
    }
  };
}

// Two readers, two sections each; a writer swaps the pointer twice, each time
// waiting for a grace period before destroying the old object.
HOTPATH_PROPERTY(synchronize, {}) {
  domain& dom = prepared_domain();
  atomic<object*> ptr(new object(1));
  auto reader = reader_of(dom, ptr, 2);
  run({reader, reader, [&] {
         for (int i = 2; i <= 3; ++i) {
           object* old = ptr.exchange(new object(i), std::memory_order_acq_rel);
           hotpath::rcu_synchronize(dom);
           delete old;
         }
       }});
  delete ptr.load(std::memory_order_relaxed);
}

// The default reclamation path: rcu_retire() gathers a batch, starts a grace period
// for it and frees it on a later retire once every reader has passed (poll()), never
// waiting. The writer retires one batch and a few more while readers read.
HOTPATH_PROPERTY(retire, {}) {
  domain& dom = prepared_domain();
  atomic<object*> ptr(new object(1));
  auto reader = reader_of(dom, ptr, 3);
  run({reader, reader, [&] {
         for (int i = 2; i < 2 + static_cast<int>(domain::batch_size) + 4; ++i)
           hotpath::rcu_retire(ptr.exchange(new object(i), std::memory_order_acq_rel),
                               std::default_delete<object>(), dom);
       }});
  hotpath::rcu_retire(ptr.load(std::memory_order_relaxed), std::default_delete<object>(), dom);
  hotpath::rcu_barrier(dom);
}

// rcu_cell: the writer stores twice and then waits for reclamation with rcu_barrier
// (retire itself never waits); readers read through guards.
struct config : graveyard_object {
  explicit config(int v) : a(v), b(-v) {}
  data<int> a;
  data<int> b;
};

HOTPATH_PROPERTY(cell, {}) {
  domain& dom = prepared_domain();
  {
    hotpath::basic_rcu_cell<config, rcu_policy> cell(std::make_unique<config>(1));
    auto reader = [&] {
      for (int r = 0; r < 2; ++r) {
        auto g = cell.read();
        const int a = g->a.read();
        yield_point();
        check(g->b.read() == -a, "a value is read whole");
      }
    };
    run({reader, reader, [&] {
           cell.store(std::make_unique<config>(2));
           cell.store(std::make_unique<config>(3));
           hotpath::rcu_barrier(dom);
         }});
  }
  hotpath::rcu_barrier(dom);  // the cell's last value, retired by its destructor
}

}  // namespace
