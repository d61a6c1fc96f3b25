#include "runtime/cli/console_log.hpp"

#include <cstdio>
#include <string>

#include "base/mutex.hpp"

namespace troupe::runtime {

namespace {

// One console for the whole process: lines from every thread in turn, and
// whether a progress line waits for its newline.
struct console {
  base::mutex mtx;
  bool progress_open TROUPE_GUARDED_BY(mtx) = false;
};

console& the_console() {
  static console c;
  return c;
}

void end_progress_line_locked(console& c) TROUPE_REQUIRES(c.mtx) {
  if (c.progress_open) {
    std::fputs("\n", stdout);
    std::fflush(stdout);
    c.progress_open = false;
  }
}

} // namespace

actors::log_sink console_log() {
  return [](actors::log_level level, const std::string& line) {
    auto& c = the_console();
    base::mutex_lock lock(c.mtx);
    if (level == actors::log_level::progress) {
      std::fputs("\r\033[K", stdout);
      std::fputs(line.c_str(), stdout);
      std::fflush(stdout);
      c.progress_open = true;
      return;
    }
    end_progress_line_locked(c);
    std::FILE* to = level == actors::log_level::info ? stdout : stderr;
    std::fputs(line.c_str(), to);
    std::fputs("\n", to);
    std::fflush(to);
  };
}

void end_console_progress_line() {
  auto& c = the_console();
  base::mutex_lock lock(c.mtx);
  end_progress_line_locked(c);
}

} // namespace troupe::runtime
