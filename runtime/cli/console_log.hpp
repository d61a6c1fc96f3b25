// The command line's listener to the library's log: info and progress lines
// to stdout, notice, warning and error lines to stderr, each flushed at once.
#pragma once

#include "actors/log.hpp"

namespace troupe::runtime {

/// A sink writing info lines to stdout and the others to stderr, a progress
/// line rewriting the terminal's current line, safe to call from several
/// threads at once (lines never interleave).
actors::log_sink console_log();

/// Ends a progress line left open (a newline on stdout); nothing otherwise.
void end_console_progress_line();

} // namespace troupe::runtime
