// A checkpoint's environment-runner states in one safetensors file
// (docs/checkpoints.md, "Runner states"): for runner k of the list, tensors
// "runner.<k>.<field>" and metadata "runner.<k>.name|env_id|num_envs|env_state",
// plus "format" = runner_states_format and "version". Written with the
// atomic write (a crash leaves the old file or the whole new one); read
// strictly.
//
// Version 2 added "runner.<k>.env_state": "saved" when the runner's
// environments saved their state (tensors env.rng, env.state and
// env.elapsed_steps present), "none" when they cannot (those three tensors
// absent; the runner starts fresh episodes on resume). Version 1 files, which
// always carry the state, still load.
//
// Version 3 added the optional tensor "runner.<k>.discounted_return" (F64
// [num_envs]): reward normalization's accumulator of each environment,
// present when the runner kept one. Versions 1 and 2 load without it.
#pragma once

#include <string>
#include <vector>

#include "actors/messages.hpp"
#include "base/error.hpp"

namespace troupe::edge {

/// The "format" metadata value of a runner-state file.
inline constexpr const char* runner_states_format = "troupe.runner_states";

/// The format version this troupe writes (it reads this one and versions 1, 2).
inline constexpr int runner_states_version = 3;

/// Writes `states` (in order; names need not be unique) to `path` with
/// learners::write_file_atomically. Fails, writing nothing, when a state's
/// arrays do not match its number of environments, naming the runner and the
/// field.
status save_runner_states(const std::string& path,
                          const std::vector<actors::env_runner_state>& states);

/// Reads the states written by save_runner_states. Checks the format name and
/// version, every tensor's presence, dtype and shape (against the runner's
/// number of environments and its environment's state size), that no tensor
/// is unknown, flags 0/1 and counters >= 0; the message names the file, the
/// runner, the tensor and the problem. Values are checked again when a state
/// is restored (vector_env::check_state, check_runner_state).
result<std::vector<actors::env_runner_state>> load_runner_states(const std::string& path);

} // namespace troupe::edge
