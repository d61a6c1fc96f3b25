// One broken locking rule per TROUPE_VIOLATION value (1-7): each must fail to
// compile with clang's -Wthread-safety -Werror=thread-safety
// (tests/thread_safety/check.sh compiles every case).
#include "tests/thread_safety/cases.hpp"

namespace troupe::test {

#if TROUPE_VIOLATION == 1
// Reads a guarded member without its lock.
long read_balance(account& a) {
  return a.balance;
}
#elif TROUPE_VIOLATION == 2
// Calls a function that requires the lock without it.
void add_unlocked(account& a) {
  a.add_locked(1);
}
#elif TROUPE_VIOLATION == 3
// Writes a guarded member after unlocking early.
void unlock_early(account& a) {
  base::mutex_lock lock(a.mtx);
  lock.unlock();
  a.balance = 1;
}
#elif TROUPE_VIOLATION == 4
// Writes through a pointer guarded by the lock without it.
void write_ledger(account& a) {
  *a.ledger = 1;
}
#elif TROUPE_VIOLATION == 5
// Writes under a shared (reader) lock.
void write_names(account& a) {
  base::reader_lock lock(a.names_mtx);
  a.names += 1;
}
#elif TROUPE_VIOLATION == 6
// Calls a function that takes the lock while holding it.
void add_twice(account& a) {
  base::mutex_lock lock(a.mtx);
  a.add(1);
}
#elif TROUPE_VIOLATION == 7
// A predicate that reads a guarded member without saying it holds the lock.
bool wait_positive(account& a) {
  base::mutex_lock lock(a.mtx);
  return lock.wait_for(a.changed, std::chrono::milliseconds(1),
                       [&] { return a.balance > 0; });
}
#else
#error "TROUPE_VIOLATION must be 1-7"
#endif

} // namespace troupe::test
