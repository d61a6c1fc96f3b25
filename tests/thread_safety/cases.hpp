// A small class whose locking base/mutex.hpp and the annotations describe:
// correct.cpp uses it as annotated, violation.cpp breaks one rule per case.
#pragma once

#include <condition_variable>

#include "base/mutex.hpp"

namespace troupe::test {

struct account {
  base::mutex mtx;
  std::condition_variable changed;
  long balance TROUPE_GUARDED_BY(mtx) = 0;
  long* ledger TROUPE_PT_GUARDED_BY(mtx) = nullptr;

  base::shared_mutex names_mtx;
  int names TROUPE_GUARDED_BY(names_mtx) = 0;

  void add_locked(long k) TROUPE_REQUIRES(mtx) { balance += k; }
  void add(long k) TROUPE_EXCLUDES(mtx) {
    base::mutex_lock lock(mtx);
    add_locked(k);
  }
};

} // namespace troupe::test
