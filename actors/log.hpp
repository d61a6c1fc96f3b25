// Where actors' log lines go: a sink the caller sets in an actor's options
// (tests capture lines this way), or stderr.
#pragma once

#include <cstdio>
#include <functional>
#include <string>

namespace troupe::actors {

/// A receiver of log lines; empty means stderr.
using log_sink = std::function<void(const std::string&)>;

/// Writes `line` to `sink`, or to stderr (with a newline) when no sink is set.
inline void write_log(const log_sink& sink, const std::string& line) {
  if (sink)
    sink(line);
  else
    std::fprintf(stderr, "%s\n", line.c_str());
}

} // namespace troupe::actors
