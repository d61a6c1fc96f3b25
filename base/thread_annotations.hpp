// Clang's thread-safety attributes under short names (after abseil's
// absl/base/thread_annotations.h), empty under other compilers
// (docs/architecture.md, "Locks and the thread-safety check").
#pragma once

#if defined(__clang__)
#define TROUPE_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define TROUPE_THREAD_ANNOTATION_(x)
#endif

// -- on types ---------------------------------------------------------------

/// The class is a lock (a capability) named `name` in the warnings.
#define TROUPE_CAPABILITY(name) TROUPE_THREAD_ANNOTATION_(capability(name))
/// The class holds a lock from its construction to its destruction (RAII).
#define TROUPE_SCOPED_CAPABILITY TROUPE_THREAD_ANNOTATION_(scoped_lockable)

// -- on data members ---------------------------------------------------------

/// The member is read and written only while `lock` is held.
#define TROUPE_GUARDED_BY(lock) TROUPE_THREAD_ANNOTATION_(guarded_by(lock))
/// What the pointer member points to is accessed only while `lock` is held.
#define TROUPE_PT_GUARDED_BY(lock) TROUPE_THREAD_ANNOTATION_(pt_guarded_by(lock))
/// This lock is taken before the locks named (lock order; checked only with
/// -Wthread-safety-beta).
#define TROUPE_ACQUIRED_BEFORE(...)                                                      \
  TROUPE_THREAD_ANNOTATION_(acquired_before(__VA_ARGS__))
/// This lock is taken after the locks named.
#define TROUPE_ACQUIRED_AFTER(...) TROUPE_THREAD_ANNOTATION_(acquired_after(__VA_ARGS__))

// -- on functions -------------------------------------------------------------

/// The caller holds the locks named, exclusively.
#define TROUPE_REQUIRES(...) TROUPE_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
/// The caller holds the locks named, at least shared.
#define TROUPE_REQUIRES_SHARED(...)                                                      \
  TROUPE_THREAD_ANNOTATION_(requires_shared_capability(__VA_ARGS__))
/// The function takes the locks named (no argument: `this`) and returns
/// holding them.
#define TROUPE_ACQUIRE(...) TROUPE_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
/// As TROUPE_ACQUIRE, shared.
#define TROUPE_ACQUIRE_SHARED(...)                                                       \
  TROUPE_THREAD_ANNOTATION_(acquire_shared_capability(__VA_ARGS__))
/// The function releases the locks named (no argument: `this`), which the
/// caller held.
#define TROUPE_RELEASE(...) TROUPE_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
/// As TROUPE_RELEASE, for a lock held shared.
#define TROUPE_RELEASE_SHARED(...)                                                       \
  TROUPE_THREAD_ANNOTATION_(release_shared_capability(__VA_ARGS__))
/// The function takes the locks when it returns `result` (a try_lock).
#define TROUPE_TRY_ACQUIRE(...)                                                          \
  TROUPE_THREAD_ANNOTATION_(try_acquire_capability(__VA_ARGS__))
/// The caller must not hold the locks named (the function takes them).
#define TROUPE_EXCLUDES(...) TROUPE_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
/// The function returns a reference to the lock named.
#define TROUPE_RETURN_CAPABILITY(lock) TROUPE_THREAD_ANNOTATION_(lock_returned(lock))
/// The function is not checked: for the rare code whose locking the analysis
/// cannot follow; say why next to it.
#define TROUPE_NO_THREAD_SAFETY_ANALYSIS                                                 \
  TROUPE_THREAD_ANNOTATION_(no_thread_safety_analysis)
