// SPDX-License-Identifier: MIT
// What each of the two hidden-visibility test libraries (lib.cpp, built twice)
// exports: one table of entry points, each a hotpath call made inside that library.
#pragma once

#include <atomic>

#include "hotpath/queued_lock.hpp"

namespace hotpath::test::shared_library {

// The value an rcu_cell holds; its destructor marks it dead and counts.
struct tracked {
  static constexpr int alive = 0x600d;
  int magic = alive;
  std::atomic<int>* destroyed = nullptr;
};

struct api {
  void (*lock)(queued_lock&);
  void (*unlock)(queued_lock&);
  // A read-side section of rcu_default_domain() around during(arg).
  void (*read_section)(void (*during)(void*), void* arg);
  void (*synchronize)();
  void (*barrier)();
  // An rcu_cell<tracked>: made, stored to, read and destroyed by either library.
  void* (*make_cell)(std::atomic<int>* destroyed);
  void (*store_cell)(void* cell, std::atomic<int>* destroyed);
  // Reads the cell in a section around during(arg); returns the magic seen after it.
  int (*read_cell)(void* cell, void (*during)(void*), void* arg);
  void (*destroy_cell)(void* cell);
};

}  // namespace hotpath::test::shared_library

#define HOTPATH_TEST_EXPORT __attribute__((visibility("default")))
extern "C" HOTPATH_TEST_EXPORT const hotpath::test::shared_library::api* hotpath_test_lib_a();
extern "C" HOTPATH_TEST_EXPORT const hotpath::test::shared_library::api* hotpath_test_lib_b();
