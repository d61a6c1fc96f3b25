// Training a config to its end in one call: run_training() opens a session
// (runtime/session.hpp), starts it, waits for it and closes it. The `troupe
// train` command (runtime/cli/cmd_train.cpp) drives a session itself, so
// that its signal handlers can stop the run cleanly.
#pragma once

#include <string>

#include "base/error.hpp"
#include "runtime/config.hpp"
#include "runtime/session.hpp"

namespace troupe::runtime {

/// Trains with `cfg` until its budget is spent. With `resume_dir`, continues
/// the run in that folder from its newest complete checkpoint; otherwise
/// creates <run.output_dir>/<run.name>-<YYYYmmdd-HHMMSS>/. Installs no signal
/// handler. Its log lines go to `options.log` (none: nowhere).
result<training_result> run_training(const config& cfg,
                                     const std::string& resume_dir = {},
                                     session_options options = {});

} // namespace troupe::runtime
