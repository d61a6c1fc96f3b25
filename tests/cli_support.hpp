// Support for black-box tests of the `troupe` command line: a runner that
// captures exit status, stdout and stderr inside a temporary folder
// (tests/temp_folder.hpp), and helpers to pick the command's output apart.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tests/temp_folder.hpp"

namespace troupe::test {

/// What a command did.
struct run_result {
  int status = -1; ///< exit status, -1 when killed by a signal or not started
  std::string out; ///< stdout
  std::string err; ///< stderr
};

/// Runs the shell command line `command_line` with `dir` as working folder.
inline run_result run_command(const std::string& command_line, const temp_folder& dir) {
  // stderr goes to a file inside the folder, read back once the command ends.
  auto err_path = (dir.path / "stderr.txt").string();
  auto full =
    fmt::format("cd '{}' && ( {} ) 2> '{}'", dir.path.string(), command_line, err_path);
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
  std::ifstream in(err_path, std::ios::binary);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
}

/// Longest a `troupe` command of a test may run before coreutils' timeout
/// ends it (exit status 124), so that a hung command fails its test and is
/// not left behind when CTest ends the test at its own timeout.
constexpr int troupe_command_limit_s = 600;

/// Runs `troupe ARGS` (arguments already shell-quoted) inside `dir`.
inline run_result run_troupe(const std::string& args, const temp_folder& dir) {
  return run_command(
    fmt::format("timeout -k 10 {} '{}' {}", troupe_command_limit_s, TROUPE_BINARY, args),
    dir);
}

/// The lines of `text`, without their '\n'; a last line without one counts.
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos)
      end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

/// A one-line JSON output taken apart: its shape and its number literals.
struct json_numbers {
  std::string skeleton;             ///< the line with every number replaced by '#'
  std::vector<std::string> numbers; ///< the number literals, in order
};

/// Splits a one-line JSON object into skeleton and numbers; a number is
/// recognised where a value starts (after '[', ':' or ','). Spaces outside
/// strings are left out of the skeleton, so that "a": [1, 2] and "a":[1,2]
/// have the same shape.
inline json_numbers split_json_numbers(const std::string& line) {
  json_numbers parts;
  size_t i = 0;
  bool in_string = false;
  while (i < line.size()) {
    char c = line[i];
    if (in_string) {
      parts.skeleton += c;
      if (c == '\\' && i + 1 < line.size())
        parts.skeleton += line[++i];
      else if (c == '"')
        in_string = false;
      ++i;
      continue;
    }
    if (c == ' ') {
      ++i;
      continue;
    }
    const char before = parts.skeleton.empty() ? '\0' : parts.skeleton.back();
    bool starts_number = (c == '-' || (c >= '0' && c <= '9')) &&
                         (before == '[' || before == ':' || before == ',');
    if (!starts_number) {
      in_string = c == '"';
      parts.skeleton += c;
      ++i;
      continue;
    }
    size_t end = line.find_first_of(",]} ", i);
    parts.numbers.push_back(line.substr(i, end - i));
    parts.skeleton += '#';
    i = end;
  }
  return parts;
}

} // namespace troupe::test
