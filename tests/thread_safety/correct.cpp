// Every use of tests/thread_safety/cases.hpp's account as annotated: must
// compile with clang's -Wthread-safety -Werror=thread-safety.
#include <chrono>

#include "tests/thread_safety/cases.hpp"

namespace troupe::test {

long read_balance(account& a) {
  base::mutex_lock lock(a.mtx);
  return a.balance;
}

void unlock_early(account& a) {
  base::mutex_lock lock(a.mtx);
  a.balance = 1;
  lock.unlock();
  lock.lock();
  a.balance = 2;
}

void leave_unlocked(account& a) {
  base::mutex_lock lock(a.mtx);
  a.balance = 3;
  lock.unlock();
}

bool wait_positive(account& a) {
  base::mutex_lock lock(a.mtx);
  return lock.wait_for(a.changed, std::chrono::milliseconds(1),
                       [&]() TROUPE_REQUIRES(a.mtx) { return a.balance > 0; });
}

void write_ledger(account& a) {
  base::mutex_lock lock(a.mtx);
  if (a.ledger)
    *a.ledger = a.balance;
}

int read_names(account& a) {
  base::reader_lock lock(a.names_mtx);
  return a.names;
}

void write_names(account& a) {
  base::writer_lock lock(a.names_mtx);
  a.names += 1;
}

bool try_add(account& a) {
  if (!a.mtx.try_lock())
    return false;
  a.add_locked(1);
  a.mtx.unlock();
  return true;
}

} // namespace troupe::test
