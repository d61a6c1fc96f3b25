// A small class whose locking kernels/mutex.hpp and the annotations describe:
// correct.cpp uses it as annotated, violation.cpp breaks one rule per case.
#pragma once

#include <condition_variable>

#include "kernels/mutex.hpp"

namespace troupe::test {

struct account {
  kernels::mutex mtx;
  std::condition_variable changed;
  long balance TROUPE_GUARDED_BY(mtx) = 0;
  long* ledger TROUPE_PT_GUARDED_BY(mtx) = nullptr;

  kernels::shared_mutex names_mtx;
  int names TROUPE_GUARDED_BY(names_mtx) = 0;

  void add_locked(long k) TROUPE_REQUIRES(mtx) { balance += k; }
  void add(long k) TROUPE_EXCLUDES(mtx) {
    kernels::mutex_lock lock(mtx);
    add_locked(k);
  }
};

} // namespace troupe::test
