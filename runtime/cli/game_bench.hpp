// The embedding microbenchmark of `troupe bench embed`: a game loop of
// CartPoles drives a game agent while one PPO learner trains from it, and the
// latency of every act() call is measured (docs/benchmarks.md).
#pragma once

#include <cstdint>
#include <cstddef>

#include "base/error.hpp"

namespace troupe::runtime {

/// Settings of the embedding benchmark.
struct embed_bench_options {
  uint64_t seed = 1;                 ///< model, slots and environments
  size_t slots = 4;                  ///< CartPoles, one slot each (one batch column each)
  size_t steps_per_segment = 128;    ///< T
  size_t queue_capacity = 8;         ///< segments
  uint64_t train_env_steps = 200000; ///< the learner's budget; 0: no training
  uint64_t untrained_act_calls = 200000; ///< with no training: act() calls made
  size_t latency_samples = 1000000;      ///< act() calls timed, at most (the first ones)
  double frame_hz = 0;    ///< frames per second (sleep to each deadline); 0: unthrottled
  uint64_t frames = 1200; ///< throttled: frames played (the loop's length)
  bool spin = false;      ///< throttled: busy-wait to each deadline instead of sleeping
                          ///< (the core never idles: a diagnostic, not how a game waits)
  bool batch = false;     ///< throttled: one act_batch() per frame for every slot
};

/// Latency percentiles of one kind of timed call, in microseconds.
struct latency_summary {
  double p50_us = 0;    ///< median
  double p99_us = 0;    ///< 99th percentile
  double max_us = 0;    ///< largest
  uint64_t samples = 0; ///< calls timed
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
  // Throttled only. Frames alternate which runs first after the sleep: the
  // acts (odd frames) or the control (even frames), so that neither warms
  // the core for the other.
  // With batch, first_act is a frame's act_batch() call where it runs first
  // after the wait, rest_act one where it runs after the control.
  latency_summary first_act;     ///< the first act() of a frame that acts first
  latency_summary rest_act;      ///< every other act() of every frame
  latency_summary control_first; ///< the control right after the sleep
  latency_summary control_warm;  ///< the control right after a frame's acts
  uint64_t frames = 0;           ///< frames played
  uint64_t missed_frames = 0;    ///< frames whose work ended past the next deadline
};

/// Runs the benchmark: the game loop runs until the learner has spent
/// train_env_steps (a few seconds per 100k steps on this machine).
result<embed_bench_result> run_embed_bench(const embed_bench_options& opts);

} // namespace troupe::runtime
