// A process-wide limit on the size of written files, for tests of what a
// writer does when the system refuses a write (as on a full disk): a write
// past the limit fails with EFBIG instead of raising SIGXFSZ. The limit and
// the signal's disposition are restored at scope exit.
#pragma once

#include <sys/resource.h>

#include <csignal>
#include <cstdint>

namespace troupe::test {

/// Files may grow to at most `bytes` while this lives.
class file_size_limit {
public:
  explicit file_size_limit(uint64_t bytes) {
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &old_);
    rlimit lower = old_;
    lower.rlim_cur = static_cast<rlim_t>(bytes);
    ok_ = ::setrlimit(RLIMIT_FSIZE, &lower) == 0;
  }
  ~file_size_limit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }
  file_size_limit(const file_size_limit&) = delete;
  file_size_limit& operator=(const file_size_limit&) = delete;

  /// Whether the limit took effect.
  bool ok() const noexcept { return ok_; }

private:
  rlimit old_{};
  void (*old_handler_)(int) = SIG_DFL;
  bool ok_ = false;
};

} // namespace troupe::test
