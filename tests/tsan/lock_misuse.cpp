// SPDX-License-Identifier: MIT
// Misuse of hotpath locks that ThreadSanitizer reports once the locks carry its mutex
// annotations (detail/annotations.hpp), as it does for std::mutex. Run as a
// subprocess by CTest in a TSan build (tests/CMakeLists.txt), which expects TSan's
// report in the output:
//
//   lock_misuse inversion <a> <b>   thread 1 takes a then b; once it is done, thread 2
//                                   takes b then a: no deadlock happens, but TSan's
//                                   lock graph has a cycle ("lock-order-inversion")
//   lock_misuse double-unlock <a>   lock, unlock, unlock again ("unlock of an
//                                   unlocked mutex")
//
// <a>, <b>: ticket, mcs, mcs-node, mcs-guard, queued, queued-fifo, priority,
// priority-privileged (the lock and the way in; a and b are two distinct locks).
// Built a second time without the annotations (HOTPATH_NO_TSAN_ANNOTATIONS), where
// TSan must report nothing: what the annotations add.
#include <hotpath/mcs_lock.hpp>
#include <hotpath/priority_lock.hpp>
#include <hotpath/queued_lock.hpp>
#include <hotpath/ticket_lock.hpp>

#include <cstdio>
#include <functional>
#include <memory>
#include <string_view>
#include <thread>

namespace {

// One lock and one way of taking it, type-erased.
struct way_in {
  std::function<void()> lock, unlock;
};

// A lock whose way in is the member function `lock_fn`, owned by `keep`.
template <class Lock, class LockFn>
way_in simple(std::shared_ptr<void>& keep, LockFn lock_fn) {
  auto l = std::make_shared<Lock>();
  keep = l;
  return {[l, lock_fn] { ((*l).*lock_fn)(); }, [l] { l->unlock(); }};
}

// A lock of the kind named, owned by `keep`, and its way in.
bool make(std::string_view kind, std::shared_ptr<void>& keep, way_in& w) {
  using hotpath::mcs_lock, hotpath::priority_lock, hotpath::queued_lock, hotpath::ticket_lock;
  if (kind == "ticket") {
    w = simple<ticket_lock>(keep, &ticket_lock::lock);
  } else if (kind == "mcs") {
    w = simple<mcs_lock>(keep, static_cast<void (mcs_lock::*)() noexcept>(&mcs_lock::lock));
  } else if (kind == "mcs-node") {
    struct s {
      mcs_lock lock;
      mcs_lock::node node;
    };
    auto l = std::make_shared<s>();
    w = {[l] { l->lock.lock(l->node); }, [l] { l->lock.unlock(l->node); }};
    keep = l;
  } else if (kind == "mcs-guard") {
    struct s {
      mcs_lock lock;
      std::unique_ptr<mcs_lock::guard> g;
    };
    auto l = std::make_shared<s>();
    w = {[l] { l->g = std::make_unique<mcs_lock::guard>(l->lock); }, [l] { l->g.reset(); }};
    keep = l;
  } else if (kind == "queued") {
    w = simple<queued_lock>(keep, &queued_lock::lock);
  } else if (kind == "queued-fifo") {
    w = simple<queued_lock>(keep, &queued_lock::lock_fifo);
  } else if (kind == "priority") {
    w = simple<priority_lock>(keep, &priority_lock::lock);
  } else if (kind == "priority-privileged") {
    w = simple<priority_lock>(keep, &priority_lock::lock_priority);
  } else {
    return false;
  }
  return true;
}

int usage() {
  std::fprintf(stderr, "usage: lock_misuse inversion <a> <b> | double-unlock <a>\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const std::string_view what = argv[1];
  std::shared_ptr<void> keep_a, keep_b;
  way_in a, b;
  if (!make(argv[2], keep_a, a)) return usage();

  if (what == "inversion") {
    if (argc != 4 || !make(argv[3], keep_b, b)) return usage();
    std::thread([&] {
      a.lock();
      b.lock();
      b.unlock();
      a.unlock();
    }).join();
    std::thread([&] {
      b.lock();
      a.lock();  // TSan: lock-order-inversion (a before b above, b before a here)
      a.unlock();
      b.unlock();
    }).join();
  } else if (what == "double-unlock" && argc == 3) {
    std::thread([&] {
      a.lock();
      a.unlock();
      a.unlock();  // TSan: unlock of an unlocked mutex (it stops the program here)
    }).join();
  } else {
    return usage();
  }
  std::printf("lock_misuse: %s done\n", argv[1]);
  return 0;
}
