// The `troupe` commands. Each takes the arguments after its words and returns
// the process exit status: 0 success, 2 bad input (nothing started or
// written), 1 a failure while running.
#pragma once

#include <string>
#include <vector>

namespace troupe::runtime {

/// Exit status for bad input: a config, argument or file a user must fix.
constexpr int exit_bad_input = 2;

/// Exit status for a failure while running.
constexpr int exit_failure = 1;

using args_t = std::vector<std::string>;

int cmd_config_describe(const args_t& args);
int cmd_check(const args_t& args);
int cmd_stats_compute(const args_t& args); // runtime/cli/cmd_stats.cpp
int cmd_env_list(const args_t& args);      // runtime/cli/cmd_env.cpp
int cmd_env_replay(const args_t& args);    // runtime/cli/cmd_env.cpp
int cmd_policy_act(const args_t& args);    // runtime/cli/cmd_policy.cpp
int cmd_train(const args_t& args);         // runtime/cli/cmd_train.cpp
int cmd_worker(const args_t& args);        // runtime/cli/cmd_worker.cpp
int cmd_eval(const args_t& args);          // runtime/cli/cmd_eval.cpp
int cmd_plot(const args_t& args);          // runtime/cli/cmd_plot.cpp
int cmd_bench(const args_t& args);         // runtime/cli/cmd_bench.cpp
int cmd_remote_keygen(const args_t& args); // runtime/cli/cmd_remote.cpp
int cmd_version(const args_t& args);

// `troupe bench AREA`, one function per area.
int bench_stats(const args_t& args);     // runtime/cli/bench_stats.cpp
int bench_envs(const args_t& args);      // runtime/cli/bench_envs.cpp
int bench_learner(const args_t& args);   // runtime/cli/bench_learner.cpp
int bench_embed(const args_t& args);     // runtime/cli/bench_embed.cpp
int bench_remote(const args_t& args);    // runtime/cli/bench_remote.cpp
int bench_allreduce(const args_t& args); // runtime/cli/bench_allreduce.cpp

/// Prints `message` to stderr prefixed with "troupe: " and returns `status`.
int fail(int status, const std::string& message);

} // namespace troupe::runtime
