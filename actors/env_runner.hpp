// The environment runner actor: steps a vector of environments with a policy
// and streams fixed-length trajectory batches to a learner
// (docs/environments.md, "The environment runner actor").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <caf/all.hpp>

#include "actors/log.hpp"
#include "actors/messages.hpp"
#include "envs/vector_env.hpp"
#include "base/rng.hpp"
#include "learners/stats_view.hpp"

namespace troupe::actors {

/// A policy: writes actions [num_envs x action_dim] for observations
/// [num_envs x obs_dim], drawing whatever randomness it needs from `gen` (the
/// runner's generator, so that a runner's state holds every random stream it
/// uses), writes the log-probability (log-density for Box actions, of the
/// unclipped draw) of each action under the policy into `logp` [num_envs]
/// when not null, and returns the version of the policy it used, or an error
/// (which ends the runner with that error, naming it).
using policy_fn =
  std::function<result<uint64_t>(const float* observations, size_t num_envs,
                                 base::rng& gen, float* actions, float* logp)>;

/// A policy that draws uniformly random valid actions (version 0).
policy_fn make_random_policy(const envs::space& action_space);

/// How far apart one policy acts on two views of the same observations: the
/// mean over `rows` pairs of KL(pi(.|a_i) || pi(.|b_i)) in nats, with one
/// fixed set of weights (run.norm_diagnostics).
using divergence_fn =
  std::function<result<double>(const float* a, const float* b, size_t rows)>;

/// Settings of an environment runner.
struct env_runner_options {
  std::string name = "env_runner";  ///< named in batches, logs and deltas
  uint64_t seed = 0;                ///< environment i is seeded with seed + i; the
                                    ///< policy's generator with seed ^ policy_salt
  size_t steps_per_batch = 128;     ///< T
  std::string stats_stream = "obs"; ///< keeper stream of observation moments
  double obs_epsilon = 1e-8;        ///< added to the variance when normalizing
  double obs_clip = 10.0;           ///< normalized values clipped to +-this; 0: no clip
  double obs_scale = 1.0;           ///< raw observations are multiplied by this first
                                    ///< (heterogeneous-worker experiments)
  log_sink log;                     ///< problem log; empty: nowhere
  std::optional<env_runner_state> start_state; ///< start here instead of reset(seed)
                                               ///< (seed is then unused)
  /// A guest's batches go to the learner that last sent (consumer_atom): a
  /// request still open for the learner before is ended, and a collect from
  /// any other learner is refused, saying so.
  bool guest = false;
  /// With a view (observation normalization): normalize with this runner's
  /// own running moments instead of the view's global ones, as one
  /// VecNormalize per worker would (model.obs_norm_scope = "runner"). They
  /// start at mean 0, variance 1 and merge each clean batch's raw moments
  /// after it is collected; a restarted runner starts them again. The view
  /// still gives the batch its statistics version, and the keeper still gets
  /// the raw moments (checkpoints and eval use the global ones).
  bool local_obs_stats = false;
  /// Box actions go to the environments clipped to the action space's bounds
  /// (Gymnasium's ClipAction, as CleanRL wraps its continuous environments
  /// and `troupe eval` acts); the batch keeps the unclipped draw, whose
  /// log-probability the learner takes.
  bool clip_box_actions = false;
  /// Normalize rewards by the return view's variance (spawn_env_runner's
  /// return_view); the discounted returns' moments go to the keeper.
  bool reward_norm = false;
  std::string return_stream = "ret"; ///< keeper stream of discounted-return moments
  double reward_gamma = 0.99;   ///< discount of the returns (model.reward_norm_gamma)
  double reward_epsilon = 1e-8; ///< added to the return variance
  double reward_clip = 10.0;    ///< normalized rewards clipped to +-this; 0: no clip
  /// With reward_norm: divide by this runner's own running variance of its
  /// discounted returns instead of the return view's, as one VecNormalize
  /// per worker would (model.reward_norm_scope = "runner"). It is 1 until
  /// the first clean batch, then the moments of every clean batch's returns
  /// so far, merged after the batch; a restarted runner starts it again.
  /// The view still gives the batch its version, and the keeper still gets
  /// the returns' moments.
  bool local_return_stats = false;
  /// Normalize each step with statistics that include the batch's own steps
  /// so far (model.norm_update = "step"), as Gymnasium's NormalizeObservation
  /// and NormalizeReward update before they normalize: step t's observations
  /// with the batch's snapshot (global or local) merged with the raw moments
  /// of steps 0..t, its rewards with the return variance merged with the
  /// batch's discounted returns up to it. Off: one snapshot and one return
  /// variance for the whole batch. The moments sent to the keeper, merged
  /// locally and checkpointed are the same either way; after a non-finite
  /// value the rest of the batch keeps the last clean statistics.
  bool norm_every_step = false;
  /// An uneven fleet (env.slowdown): the environments' steps take this many
  /// times as long as they do. After each step the runner owes
  /// (slowdown - 1) x the step's measured time, and waits it out once it
  /// owes `slowdown_wait_ns` or more, and before each batch goes. The wait
  /// blocks the runner's scheduler thread (not a core). 1: no wait.
  double slowdown = 1.0;
  uint64_t slowdown_wait_ns = 5'000'000;
  /// The clock steps are timed with and the wait (tests replace them);
  /// empty: std::chrono::steady_clock and std::this_thread::sleep_for.
  std::function<uint64_t()> clock_ns;
  std::function<void(uint64_t ns)> wait_ns;
  /// run.norm_diagnostics: what normalization does to the policy, measured
  /// at the start of each batch on the previous batch's raw observations and
  /// written into the batch (trajectory_batch::obs_shift_kl and the rest):
  /// the policy's KL across the normalizer's change since the previous batch
  /// and, with local statistics, between this runner's normalizer and the
  /// view's global one; and the same for the reward scale. The observation
  /// terms need `divergence` (the newest weights, so that only the
  /// normalizer differs); empty: they stay NaN.
  bool norm_diagnostics = false;
  divergence_fn divergence;
};

/// One step of reward normalization's discounted return, as Gymnasium's
/// NormalizeReward: the return times gamma (times 0 when the step
/// terminated) plus the step's reward; truncation does not reset it.
inline double next_discounted_return(double previous, float reward, bool terminated,
                                     double gamma) noexcept {
  return previous * gamma * (terminated ? 0.0 : 1.0) + static_cast<double>(reward);
}

/// A reward divided by sqrt(var + epsilon), clipped to +-clip (clip 0: none).
float normalize_reward(float reward, double var, double epsilon, double clip) noexcept;

/// Mixed into a runner's seed to seed its policy's generator.
inline constexpr uint64_t policy_salt = 0x5bd1e995ull;

/// Whether `state` fits a runner over `env`: id, number of environments,
/// sizes and values (envs::vector_env::restore_state's rules when the state
/// carries the environments' state and `env` can restore it, plus the policy
/// generator not all zero, finite episode returns, and discounted returns
/// empty or one finite value per environment). The message names
/// `runner`, the field, the rule and the value.
status check_runner_state(const env_runner_state& state, const envs::vector_env& env,
                          const std::string& runner);

/// The seed of the fresh episodes a runner with seed `runner_seed` starts
/// when it resumes, at batch `batch`, over environments that saved no state:
/// the first draw of base::rng(runner_seed ^ (batch * 0x9e3779b97f4a7c15)).
uint64_t resume_seed(uint64_t runner_seed, uint64_t batch) noexcept;

/// Puts `env` where `state` (checked by check_runner_state) left it: restores
/// the saved environments when the state carries them and `env` can restore
/// them (returns true), otherwise starts fresh episodes with
/// reset(resume_seed(runner_seed, state.status.batches)) (returns false).
result<bool> continue_envs(envs::vector_env& env, const env_runner_state& state,
                           uint64_t runner_seed);

/// Spawns an environment runner over `env` (reset with opts.seed at start, or
/// restored from opts.start_state).
/// `keeper` (may be invalid) receives observation moment deltas (and return
/// moment deltas with opts.reward_norm); `view` (may be null) normalizes
/// observations; `return_view` (needed with opts.reward_norm) gives the
/// return variance. Batches go to `consumer`.
caf::actor spawn_env_runner(caf::actor_system& sys, env_runner_options opts,
                            std::shared_ptr<envs::vector_env> env, policy_fn policy,
                            caf::actor consumer, caf::actor keeper = {},
                            std::shared_ptr<learners::stats_view> view = nullptr,
                            std::shared_ptr<learners::stats_view> return_view = nullptr);

} // namespace troupe::actors
