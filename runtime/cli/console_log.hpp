// The command line's listener to the library's log: info and progress lines
// to stdout, notice, warning and error lines to stderr, each flushed at once.
#pragma once

#include "actors/log.hpp"

namespace troupe::runtime {

/// A sink writing each line with a newline to stdout (info) or stderr
/// (notice, warning, error); a progress line rewrites the current terminal
/// line ("\r\033[K" and the line, no newline) until another line comes.
/// Safe to call from several threads at once (lines never interleave).
actors::log_sink console_log();

/// Ends a progress line left open (a newline on stdout); nothing otherwise.
void end_console_progress_line();

} // namespace troupe::runtime
