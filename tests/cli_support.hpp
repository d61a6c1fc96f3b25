// Support for black-box tests of the `troupe` command line: a temporary
// folder that removes itself and a runner that captures exit status, stdout
// and stderr.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <fmt/format.h>

namespace troupe::test {

/// A fresh random seed; tests CAPTURE it so a failure can be replayed.
inline uint64_t fresh_seed() {
  return std::random_device{}();
}

/// A temporary folder, removed with everything in it at scope exit.
struct temp_folder {
  std::filesystem::path path;

  explicit temp_folder(const std::string& prefix) {
    path = std::filesystem::temp_directory_path()
           / fmt::format("troupe-{}-{}", prefix, fresh_seed());
    std::filesystem::create_directories(path);
  }
  ~temp_folder() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }

  /// Writes `text` to `name` inside the folder and returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    auto p = path / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
};

/// What a command did.
struct run_result {
  int status = -1;  ///< exit status, -1 when killed by a signal
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};

/// Runs `troupe ARGS` (arguments already shell-quoted) inside `dir`.
inline run_result run_troupe(const std::string& args, const temp_folder& dir) {
  auto err_path = (dir.path / "stderr.txt").string();
  auto full = fmt::format("cd '{}' && '{}' {} 2> '{}'", dir.path.string(),
                          TROUPE_BINARY, args, err_path);
  run_result r;
  FILE* pipe = ::popen(full.c_str(), "r");
  if (!pipe)
    return r;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0)
    r.out.append(buf, n);
  int st = ::pclose(pipe);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream in(err_path);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
}

} // namespace troupe::test
