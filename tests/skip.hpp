// Skipping a test case that cannot run here (no GPU, no PyTorch), so that
// CTest reports it as skipped, never as passed.
//
// TROUPE_SKIP prints "skipped: REASON" on stdout and returns from the test
// case. When every test case a run selected was skipped and none failed, the
// test binary exits with troupe::test::skip_exit_code, which CTest maps to
// "Skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt); a failure before the
// skip still fails the case.
#pragma once

#include <string>

namespace troupe::test {

/// Exit status of a test binary whose selected cases were all skipped.
constexpr int skip_exit_code = 77;

/// Records that the running test case is skipped and prints the reason.
void mark_skipped(const std::string& reason);

} // namespace troupe::test

/// Skips the rest of the current test case (use in its body, not in a helper).
#define TROUPE_SKIP(reason)                                                              \
  do {                                                                                   \
    ::troupe::test::mark_skipped(reason);                                                \
    return;                                                                              \
  } while (false)
