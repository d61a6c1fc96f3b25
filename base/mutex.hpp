// Locks that clang's thread-safety analysis can follow: a mutex and a shared
// mutex over the standard ones, and their scoped locks (docs/architecture.md,
// "Locks and the thread-safety check").
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#include "base/thread_annotations.hpp"

namespace troupe::base {

/// std::mutex, annotated as a capability. Lock it with mutex_lock.
class TROUPE_CAPABILITY("mutex") mutex {
public:
  mutex() = default;
  mutex(const mutex&) = delete;
  mutex& operator=(const mutex&) = delete;

  /// Blocks until this thread holds the mutex.
  void lock() TROUPE_ACQUIRE() { native_.lock(); }
  /// Releases the mutex this thread holds.
  void unlock() TROUPE_RELEASE() { native_.unlock(); }
  /// Takes the mutex when it is free; true when taken.
  bool try_lock() TROUPE_TRY_ACQUIRE(true) { return native_.try_lock(); }

private:
  friend class mutex_lock;
  std::mutex native_;
};

/// Holds a mutex for its scope (std::unique_lock): may unlock and lock again
/// inside it, and waits on a std::condition_variable.
class TROUPE_SCOPED_CAPABILITY mutex_lock {
public:
  /// Locks `m`.
  explicit mutex_lock(mutex& m) TROUPE_ACQUIRE(m) : lock_(m.native_) {}
  /// Unlocks the mutex when this lock still holds it.
  ~mutex_lock() TROUPE_RELEASE() {}
  mutex_lock(const mutex_lock&) = delete;
  mutex_lock& operator=(const mutex_lock&) = delete;

  /// Locks the mutex again after unlock().
  void lock() TROUPE_ACQUIRE() { lock_.lock(); }
  /// Unlocks the mutex before the end of the scope.
  void unlock() TROUPE_RELEASE() { lock_.unlock(); }

  // The waits below release the mutex while they sleep and return holding
  // it, so the analysis sees it held throughout. A predicate that reads
  // guarded members is a lambda annotated TROUPE_REQUIRES(that mutex): it is
  // called here with the mutex held, where the analysis cannot see it.

  /// Waits for a notification (or a spurious wake-up).
  void wait(std::condition_variable& cv) { cv.wait(lock_); }

  /// Waits until `done()` is true.
  template <class Predicate>
  void wait(std::condition_variable& cv,
            Predicate done) TROUPE_NO_THREAD_SAFETY_ANALYSIS {
    cv.wait(lock_, std::move(done));
  }

  /// Waits at most `timeout` for `done()`; its last value.
  template <class Rep, class Period, class Predicate>
  bool wait_for(std::condition_variable& cv,
                const std::chrono::duration<Rep, Period>& timeout,
                Predicate done) TROUPE_NO_THREAD_SAFETY_ANALYSIS {
    return cv.wait_for(lock_, timeout, std::move(done));
  }

  /// Waits for a notification until `deadline`; std::cv_status::timeout
  /// when it passed.
  template <class Clock, class Duration>
  std::cv_status wait_until(std::condition_variable& cv,
                            const std::chrono::time_point<Clock, Duration>& deadline) {
    return cv.wait_until(lock_, deadline);
  }

private:
  std::unique_lock<std::mutex> lock_;
};

/// std::recursive_mutex annotated as a capability, locked with
/// recursive_mutex_lock, which the holding thread may take again (the
/// analysis sees one hold).
class TROUPE_CAPABILITY("mutex") recursive_mutex {
public:
  recursive_mutex() = default;
  recursive_mutex(const recursive_mutex&) = delete;
  recursive_mutex& operator=(const recursive_mutex&) = delete;

  /// Blocks until this thread holds the mutex (at once when it does).
  void lock() TROUPE_ACQUIRE() { native_.lock(); }
  /// Releases one hold of this thread.
  void unlock() TROUPE_RELEASE() { native_.unlock(); }

private:
  std::recursive_mutex native_;
};

/// Holds a recursive_mutex for its scope (std::lock_guard).
class TROUPE_SCOPED_CAPABILITY recursive_mutex_lock {
public:
  /// Locks `m`.
  explicit recursive_mutex_lock(recursive_mutex& m) TROUPE_ACQUIRE(m) : m_(m) {
    m_.lock();
  }
  /// Releases it.
  ~recursive_mutex_lock() TROUPE_RELEASE() { m_.unlock(); }
  recursive_mutex_lock(const recursive_mutex_lock&) = delete;
  recursive_mutex_lock& operator=(const recursive_mutex_lock&) = delete;

private:
  recursive_mutex& m_;
};

/// std::shared_mutex annotated as a capability, locked with reader_lock
/// (shared) or writer_lock (exclusive).
class TROUPE_CAPABILITY("shared_mutex") shared_mutex {
public:
  shared_mutex() = default;
  shared_mutex(const shared_mutex&) = delete;
  shared_mutex& operator=(const shared_mutex&) = delete;

  /// Blocks until this thread holds the mutex exclusively.
  void lock() TROUPE_ACQUIRE() { native_.lock(); }
  /// Releases the exclusive hold.
  void unlock() TROUPE_RELEASE() { native_.unlock(); }
  /// Blocks until this thread holds the mutex shared.
  void lock_shared() TROUPE_ACQUIRE_SHARED() { native_.lock_shared(); }
  /// Releases a shared hold.
  void unlock_shared() TROUPE_RELEASE_SHARED() { native_.unlock_shared(); }

private:
  std::shared_mutex native_;
};

/// Holds a shared_mutex shared for its scope (std::shared_lock).
class TROUPE_SCOPED_CAPABILITY reader_lock {
public:
  /// Locks `m` shared.
  explicit reader_lock(shared_mutex& m) TROUPE_ACQUIRE_SHARED(m) : m_(m) {
    m_.lock_shared();
  }
  /// Releases it.
  ~reader_lock() TROUPE_RELEASE() { m_.unlock_shared(); }
  reader_lock(const reader_lock&) = delete;
  reader_lock& operator=(const reader_lock&) = delete;

private:
  shared_mutex& m_;
};

/// Holds a shared_mutex exclusively for its scope (std::unique_lock).
class TROUPE_SCOPED_CAPABILITY writer_lock {
public:
  /// Locks `m` exclusively.
  explicit writer_lock(shared_mutex& m) TROUPE_ACQUIRE(m) : m_(m) { m_.lock(); }
  /// Releases it.
  ~writer_lock() TROUPE_RELEASE() { m_.unlock(); }
  writer_lock(const writer_lock&) = delete;
  writer_lock& operator=(const writer_lock&) = delete;

private:
  shared_mutex& m_;
};

} // namespace troupe::base
