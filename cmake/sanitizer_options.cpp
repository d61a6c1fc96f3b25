// Default options of the sanitizer runtimes, linked into every executable of
// a TROUPE_SANITIZE build (see the root CMakeLists.txt). The runtimes call
// these weak hooks before main; the environment variables (ASAN_OPTIONS,
// UBSAN_OPTIONS, TSAN_OPTIONS) override single options.

#ifndef TROUPE_UBSAN_SUPPRESSIONS // set by the root CMakeLists.txt
#error "TROUPE_UBSAN_SUPPRESSIONS names cmake/ubsan.supp"
#endif

extern "C" {

// A finding stops the process with a failing status: a test that triggers
// one fails, and so does a `troupe` child process a test starts.
const char* __asan_default_options() {
  return "halt_on_error=1:abort_on_error=1:detect_leaks=1:"
         "detect_stack_use_after_return=1:check_initialization_order=1:"
         "strict_init_order=1:print_summary=1";
}

// CAF 0.17.6's middleman sometimes ends with 15 of its own objects in a
// reference cycle that its shutdown does not break: the BASP broker, its
// connection, node and doorman tables, a mailbox element, a node id, two
// errors and one allocation of actor_system's constructor (docs/reliability.md,
// "What the passes found"). It shows in any process that had a peer: the
// cluster tests' in-process coordinator (worker.test.cpp) too, 1 run in
// several. Debian's CAF has no frame pointers, so each report holds only
// the allocating frame, which lies in CAF's libraries; only those frames are
// named. troupe's objects are allocated in troupe's code and stay checked.
const char* __lsan_default_suppressions() {
  return "leak:libcaf_io.so\n"
         "leak:libcaf_core.so\n";
}

// UBSan has no built-in suppression hook: the file is named here
// (cmake/ubsan.supp, which says why each line is there).
const char* __ubsan_default_options() {
  return "halt_on_error=1:abort_on_error=1:print_stacktrace=1:print_summary=1:"
         "suppressions=" TROUPE_UBSAN_SUPPRESSIONS;
}

// abort_on_error=0: a finding ends the process with TSan's exit code (66)
// instead of SIGABRT, whose handler in doctest allocates while TSan holds its
// thread registry: the test then hung until CTest's timeout instead of failing.
const char* __tsan_default_options() {
  return "halt_on_error=1:abort_on_error=0:second_deadlock_stack=1:"
         "history_size=4:print_summary=1";
}

// Reports that are not troupe's to fix. Each names the upstream cause.
const char* __tsan_default_suppressions() {
  // Debian's libzmq5 is not built with ThreadSanitizer. It hands every
  // message from the thread that sends it to its I/O thread through its
  // lock-free pipes (ypipe_t over atomic_ptr_t), whose atomic operations are
  // then invisible to TSan: the I/O thread's memcpy of a message that the
  // sender's thread allocated in libzmq is reported as a race (the remote
  // environment server's tests, edge/remote_server.cpp). Only races with
  // a frame in libzmq are suppressed. With CURVE (bench remote's encrypted
  // rows) libzmq's I/O thread encrypts and decrypts those messages in Debian's
  // libsodium23, not instrumented either, so a report can hold only
  // libsodium's frames on that side: races with a frame there are suppressed
  // too (troupe calls libsodium only through libzmq).
  return "race:libzmq.so\n"
         "race:libsodium.so\n";
}

} // extern "C"
