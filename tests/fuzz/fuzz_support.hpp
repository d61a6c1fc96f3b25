// Shared pieces of the libFuzzer targets (tests/fuzz/*.fuzz.cpp): a scratch
// file for parsers that only read from a path, and a check that aborts with
// a message, so a broken invariant counts as a crash.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

#include <fmt/format.h>

namespace troupe::fuzz {

/// One file per process in /dev/shm (RAM; TMPDIR when /dev/shm is absent),
/// rewritten for each input and removed at exit.
class scratch_file {
public:
  explicit scratch_file(const char* target) {
    const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : std::getenv("TMPDIR");
    path_ = fmt::format("{}/troupe-fuzz-{}-{}", dir ? dir : "/tmp", target, getpid());
  }
  ~scratch_file() { std::remove(path_.c_str()); }
  scratch_file(const scratch_file&) = delete;
  scratch_file& operator=(const scratch_file&) = delete;

  /// Replaces the file's contents with `size` bytes and returns its path.
  const std::string& write(const uint8_t* data, size_t size) {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (!f || (size > 0 && std::fwrite(data, 1, size, f) != size) ||
        std::fclose(f) != 0) {
      std::fprintf(stderr, "fuzz: cannot write %s\n", path_.c_str());
      std::abort();
    }
    return path_;
  }

  /// Where the file is.
  const std::string& path() const noexcept { return path_; }

private:
  std::string path_;
};

/// Aborts (a crash for libFuzzer) when `cond` is false.
#define TROUPE_FUZZ_EXPECT(cond, ...)                                                    \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "%s:%d: fuzz invariant broken: %s: %s\n", __FILE__, __LINE__, \
                   #cond, ::fmt::format(__VA_ARGS__).c_str());                           \
      std::abort();                                                                      \
    }                                                                                    \
  } while (false)

} // namespace troupe::fuzz
