// Self-removing temporary folders for tests that write files (and fresh_seed,
// from tests/seed.hpp).
#pragma once

#include <filesystem>
#include <random>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "tests/seed.hpp"

namespace troupe::test {

/// A random name part (not fresh_seed: a replayed seed must not make two
/// folders share a name).
inline uint64_t unique_suffix() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

/// A temporary folder, removed with everything in it at scope exit.
struct temp_folder {
  std::filesystem::path path; ///< where the folder is

  /// Creates `<tmp>/troupe-PREFIX-<random>`; the prefix says which test made it.
  explicit temp_folder(const std::string& prefix) {
    path = std::filesystem::temp_directory_path() /
           fmt::format("troupe-{}-{:016x}", prefix, unique_suffix());
    std::filesystem::create_directories(path);
  }
  ~temp_folder() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  temp_folder(const temp_folder&) = delete;
  temp_folder& operator=(const temp_folder&) = delete;

  /// Writes `text` to `name` inside the folder and returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    auto p = path / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
};

} // namespace troupe::test
