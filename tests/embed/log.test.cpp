// The library does not print: a session with no sink writes nothing to the
// process's stdout or stderr; a session's sink hears the run folder and the
// metrics rows at info level and a resume at notice level; without a sink of
// its own a session logs to the process-wide callback (troupe.h).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <troupe/troupe.h>
#include <troupe/troupe.hpp>

#include "tests/temp_folder.hpp"

namespace fs = std::filesystem;
using troupe::test::fresh_seed;
using troupe::test::temp_folder;

namespace {

// Sends this process's stdout and stderr (file descriptors 1 and 2) to files
// while it lives; text() restores them and reads what was written. Nothing
// may be asserted while they are captured (doctest reports on stdout).
class output_capture {
public:
  explicit output_capture(const fs::path& dir)
    : out_path_(dir / "stdout.txt"), err_path_(dir / "stderr.txt") {
    std::fflush(stdout);
    std::fflush(stderr);
    saved_out_ = ::dup(1);
    saved_err_ = ::dup(2);
    redirect(out_path_, 1);
    redirect(err_path_, 2);
  }
  ~output_capture() { restore(); }

  /// Restores fds 1 and 2; what went to each.
  std::pair<std::string, std::string> text() {
    restore();
    return {read(out_path_), read(err_path_)};
  }

private:
  static void redirect(const fs::path& path, int target) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, target);
      ::close(fd);
    }
  }
  static std::string read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  void restore() {
    if (saved_out_ < 0)
      return;
    std::fflush(stdout);
    std::fflush(stderr);
    ::dup2(saved_out_, 1);
    ::dup2(saved_err_, 2);
    ::close(saved_out_);
    ::close(saved_err_);
    saved_out_ = saved_err_ = -1;
  }
  fs::path out_path_, err_path_;
  int saved_out_ = -1, saved_err_ = -1;
};

// A short CartPole run in `dir` (8 updates, a row every 2).
std::string short_run(const fs::path& dir) {
  return fmt::format(
    "[run]\nname = \"quiet\"\nseed = {}\noutput_dir = \"{}\"\nlog_every_updates = 2\n"
    "[env]\nid = \"CartPole-v1\"\nnum_envs = 2\n"
    "[algo]\nname = \"ppo\"\nmode = \"sync\"\ntotal_env_steps = 1024\nnum_steps = 64\n",
    fresh_seed() % 1000, (dir / "runs").string());
}

// Opens, starts, waits for (bounded) and closes a session; the problem, or empty.
std::string train(troupe::result<troupe::session> opened) {
  if (!opened)
    return "open: " + opened.err().message;
  if (auto ok = opened->start(); !ok)
    return "start: " + ok.err().message;
  // Bounded: the run is 1024 steps; 300 s covers a loaded machine many times over.
  auto done = opened->wait(std::chrono::seconds(300));
  if (!done)
    return "wait: " + done.err().message;
  if (!*done)
    return "training did not end within 300 s";
  if (auto closed = opened->close(); !closed)
    return "close: " + closed.err().message;
  return {};
}

// The lines a sink heard, with their levels (any thread).
struct heard_lines {
  std::mutex mtx;
  std::vector<std::pair<troupe::log_level, std::string>> lines;

  troupe::log_sink sink() {
    return [this](troupe::log_level level, const std::string& line) {
      std::lock_guard<std::mutex> lock(mtx);
      lines.emplace_back(level, line);
    };
  }
  /// How many lines at `level` start with `prefix`.
  size_t count(troupe::log_level level, const std::string& prefix) {
    std::lock_guard<std::mutex> lock(mtx);
    size_t n = 0;
    for (auto& [l, line] : lines)
      n += l == level && line.rfind(prefix, 0) == 0;
    return n;
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mtx);
    std::string out;
    for (auto& [l, line] : lines)
      out += fmt::format("{} {}\n", static_cast<int>(l), line);
    return out;
  }
};

} // namespace

TEST_CASE("an embedded session with no sink writes nothing to stdout or stderr") {
  temp_folder dir("embed-silent");
  troupe_set_log_callback(nullptr, nullptr);
  std::string problem;
  std::pair<std::string, std::string> printed;
  {
    output_capture capture(dir.path);
    problem = train(troupe::session::open_toml(short_run(dir.path), "quiet.toml"));
    printed = capture.text();
  }
  INFO(problem);
  REQUIRE(problem.empty());
  CHECK_MESSAGE(printed.first.empty(), "stdout: " << printed.first);
  CHECK_MESSAGE(printed.second.empty(), "stderr: " << printed.second);
}

TEST_CASE("a session's sink hears the run folder and the rows at info level, a resume "
          "at notice level, and nothing is printed") {
  temp_folder dir("embed-sink");
  heard_lines first;
  troupe::session_options options;
  options.log = first.sink();
  std::string problem;
  std::pair<std::string, std::string> printed;
  {
    output_capture capture(dir.path);
    problem =
      train(troupe::session::open_toml(short_run(dir.path), "heard.toml", {}, options));
    printed = capture.text();
  }
  INFO(problem);
  REQUIRE(problem.empty());
  INFO(first.all());
  CHECK(printed.first.empty());
  CHECK(printed.second.empty());
  CHECK(first.count(troupe::log_level::info, "troupe: run folder ") == 1);
  // 8 updates: rows at 2, 4, 6 and 8 (the last may be the final row).
  CHECK(first.count(troupe::log_level::info, "steps ") >= 4);
  CHECK(first.count(troupe::log_level::progress, "") == 0);
  CHECK(first.count(troupe::log_level::error, "") == 0);

  // Resumed with a larger budget: the checkpoint it continues from is a notice.
  std::vector<fs::path> runs;
  for (auto& e : fs::directory_iterator(dir.path / "runs"))
    runs.push_back(e.path());
  REQUIRE(runs.size() == 1);
  heard_lines second;
  options.log = second.sink();
  problem = train(
    troupe::session::resume(runs[0].string(), {"algo.total_env_steps=1536"}, options));
  INFO(problem);
  REQUIRE(problem.empty());
  INFO(second.all());
  CHECK(second.count(troupe::log_level::notice,
                     "troupe: resuming from " + (runs[0] / "checkpoints").string()) == 1);
  CHECK(second.count(troupe::log_level::info, "troupe: run folder " + runs[0].string()) ==
        1);
}

namespace {

struct callback_log {
  std::mutex mtx;
  std::vector<std::pair<int, std::string>> lines;
};

void remember(int level, const char* message, void* user) {
  auto* log = static_cast<callback_log*>(user);
  std::lock_guard<std::mutex> lock(log->mtx);
  log->lines.emplace_back(level, message);
}

} // namespace

TEST_CASE("a session without a sink of its own logs to troupe_set_log_callback's "
          "callback, and to nothing once it is removed") {
  temp_folder dir("embed-callback");
  callback_log heard;
  troupe_set_log_callback(remember, &heard);
  const std::string problem =
    train(troupe::session::open_toml(short_run(dir.path), "callback.toml"));
  troupe_set_log_callback(nullptr, nullptr);
  INFO(problem);
  REQUIRE(problem.empty());
  size_t run_folder = 0, rows = 0, bad_level = 0, before = 0;
  {
    std::lock_guard<std::mutex> lock(heard.mtx);
    for (auto& [level, line] : heard.lines) {
      bad_level += level < TROUPE_LOG_PROGRESS || level > TROUPE_LOG_ERROR;
      run_folder += level == TROUPE_LOG_INFO && line.rfind("troupe: run folder ", 0) == 0;
      rows += level == TROUPE_LOG_INFO && line.rfind("steps ", 0) == 0;
    }
    before = heard.lines.size();
  }
  CHECK(bad_level == 0);
  CHECK(run_folder == 1);
  CHECK(rows >= 4);

  // Removed: a second session's lines reach nobody (and nothing is printed).
  std::string again;
  std::pair<std::string, std::string> printed;
  {
    output_capture capture(dir.path);
    again = train(troupe::session::open_toml(short_run(dir.path), "callback.toml"));
    printed = capture.text();
  }
  INFO(again);
  REQUIRE(again.empty());
  std::lock_guard<std::mutex> lock(heard.mtx);
  CHECK(heard.lines.size() == before);
  CHECK(printed.first.empty());
  CHECK(printed.second.empty());
}
