// The embedding microbenchmark that `troupe bench embed` runs: a game loop of
// CartPoles stepped on the calling thread drives a game agent while one PPO
// learner trains from it (statistics keeper, parameter server, learner and
// game feeder wired by hand, as a session does), and the latency of every
// act() call is measured.
#pragma once

#include <cstdint>
#include <cstddef>

#include "kernels/error.hpp"

namespace troupe::actors {

/// Settings of the embedding benchmark.
struct embed_bench_options {
  uint64_t seed = 1;                 ///< model, slots and environments
  size_t slots = 4;                  ///< CartPoles, one slot each (one batch column each)
  size_t steps_per_segment = 128;    ///< T
  size_t queue_capacity = 8;         ///< segments
  uint64_t train_env_steps = 200000; ///< the learner's budget; 0: no training
  uint64_t untrained_act_calls = 200000; ///< with no training: act() calls made
  size_t latency_samples = 1000000;      ///< act() calls timed, at most (the first ones)
};

/// What the benchmark measured.
struct embed_bench_result {
  double act_p50_us = 0;              ///< act() latency, median
  double act_p99_us = 0;              ///< 99th percentile
  double act_max_us = 0;              ///< largest
  uint64_t act_samples = 0;           ///< act() calls timed
  uint64_t game_env_steps = 0;        ///< env steps the game loop made
  double game_env_steps_per_s = 0;    ///< per second of the loop
  uint64_t learned_env_steps = 0;     ///< env steps the learner learned from
  double learned_env_steps_per_s = 0; ///< per second of the loop
  uint64_t dropped = 0;               ///< transitions dropped (queue full)
  uint64_t episodes = 0;              ///< episodes the game finished
  double return_mean_100 = 0;         ///< mean return of the last 100
  double seconds = 0;                 ///< wall time of the loop
};

/// Runs the benchmark: the game loop runs until the learner has spent
/// train_env_steps (a few seconds per 100k steps on this machine).
result<embed_bench_result> bench_embed(const embed_bench_options& opts);

} // namespace troupe::actors
