// Training a config to its end in one call: run_training() opens a session,
// starts it, waits for it and closes it.
#pragma once

#include <string>

#include "base/error.hpp"
#include "runtime/config.hpp"
#include "runtime/session.hpp"

namespace troupe::runtime {

/// Trains with `cfg` until its budget is spent, in a new run folder
/// <run.output_dir>/<run.name>-<YYYYmmdd-HHMMSS>/ or continuing `resume_dir`,
/// installing no signal handler and logging to `options.log` only.
result<training_result> run_training(const config& cfg,
                                     const std::string& resume_dir = {},
                                     session_options options = {});

} // namespace troupe::runtime
