// N copies of one environment stepped as a batch, with structure-of-arrays
// float32 buffers (owned by the vector env, valid until the next reset or
// step) and Gymnasium 1.x's next-step autoreset (docs/environments.md,
// "Vector environments").
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "envs/env.hpp"

namespace troupe::base {
class worker_pool;
} // namespace troupe::base

namespace troupe::envs {

/// Everything a vector env's future steps depend on, per environment, in
/// structure-of-arrays form (environment i's values at i, or at i * width).
struct vector_env_state {
  std::string env_id;                 ///< environment id, e.g. "CartPole-v1"
  uint64_t num_envs = 0;              ///< N
  bool with_state = true;             ///< the environments saved their state: false
                                      ///< leaves rng, state and elapsed_steps empty
  std::vector<uint64_t> rng;          ///< [N x 4] generator words (never all zero)
  std::vector<double> state;          ///< [N x state_dim] float64 internal state
  std::vector<int32_t> elapsed_steps; ///< [N] time-limit counters, 0..max_episode_steps
  std::vector<float> rewards;         ///< [N] rewards of the last step
  std::vector<uint8_t> terminated;    ///< [N] last step terminated (0/1)
  std::vector<uint8_t> truncated;     ///< [N] last step truncated (0/1)
  std::vector<uint8_t> autoreset;     ///< [N] last step was an autoreset (0/1)
};

/// Whether two states are equal in every field, floats compared bit for bit.
bool same_state(const vector_env_state& a, const vector_env_state& b) noexcept;

/// A batch of environments of one id.
class vector_env {
public:
  /// `threads` > 1 steps disjoint ranges of environments on worker threads
  /// once there are at least `min_per_thread` environments per thread.
  vector_env(env_spec spec, size_t num_envs, size_t threads,
             size_t min_per_thread = min_envs_per_thread);
  virtual ~vector_env();

  vector_env(const vector_env&) = delete;
  vector_env& operator=(const vector_env&) = delete;

  /// Environments per thread below which extra threads are not used, unless
  /// the environment says otherwise (a model's own min_envs_per_thread).
  static constexpr size_t min_envs_per_thread = 256;

  /// Id, spaces, time limit and state layout of each environment.
  const env_spec& spec() const noexcept { return spec_; }

  /// Number of environments.
  size_t num_envs() const noexcept { return num_envs_; }

  /// Number of threads a step uses (the caller's included).
  size_t threads() const noexcept { return chunks_; }

  /// Floats per observation.
  size_t obs_dim() const noexcept { return obs_dim_; }

  /// Floats per action.
  size_t action_dim() const noexcept { return action_dim_; }

  /// Seeds environment i with seed + i and resets every environment; the
  /// rewards, flags and autoreset buffers become 0.
  void reset(uint64_t seed);

  /// Steps every environment with its action (actions [num_envs x
  /// action_dim]), failing before reset(), on an action outside the action
  /// space (stepping nothing) or with the error of the lowest environment
  /// whose own step fails (the others may have been stepped).
  status step(const float* actions);

  /// Observations [num_envs x obs_dim].
  const float* observations() const noexcept { return observations_.data(); }
  /// Rewards of the last step [num_envs].
  const float* rewards() const noexcept { return rewards_.data(); }
  /// Terminated flags of the last step [num_envs].
  const uint8_t* terminated() const noexcept { return terminated_.data(); }
  /// Truncated flags of the last step [num_envs].
  const uint8_t* truncated() const noexcept { return truncated_.data(); }
  /// Whether the last step reset each environment [num_envs].
  const uint8_t* autoreset() const noexcept { return autoreset_.data(); }
  /// The last step's reward terms [num_envs x spec().reward_terms.size()]
  /// (float64, 0 after a reset and on an autoreset step).
  const double* reward_terms() const noexcept { return reward_terms_.data(); }

  /// Writes the trouble counters (spec().counters.size() values), each the
  /// sum over the environments since this vector env was made.
  virtual void counters(uint64_t* out) const;

  /// Whether step() accepts finite Box actions outside the bounds and lets
  /// the environments clip them (see env::set_clip_box_actions).
  void set_clip_box_actions(bool on) noexcept { clip_box_actions_ = on; }

  /// Whether the environments can save their state (env::can_save_state);
  /// when false, state(i), elapsed_steps(i) and rng_state(i) are not called.
  virtual bool can_save_state() const noexcept { return true; }

  /// Internal float64 state of environment i.
  virtual std::vector<double> state(size_t i) const = 0;

  /// Time-limit counter of environment i.
  virtual int elapsed_steps(size_t i) const = 0;

  /// The four generator words of environment i (base::rng::state).
  virtual std::array<uint64_t, 4> rng_state(size_t i) const = 0;

  /// Everything the next steps depend on (see vector_env_state).
  vector_env_state save_state() const;

  /// Whether restore_state(s) would succeed, with a message naming the
  /// environment, the field, the rule and the value when it would not.
  status check_state(const vector_env_state& s) const;

  /// Replaces every environment's state, the last step's buffers and the
  /// observations with those of `s` after check_state, changing nothing when
  /// the check fails (reset() before stepping again after any failure).
  status restore_state(const vector_env_state& s);

protected:
  /// Resets environments [begin, end) from seed + index, writing their observations.
  virtual void reset_range(size_t begin, size_t end, uint64_t seed) = 0;

  /// Steps environments [begin, end) (autoreset included), writing every
  /// buffer for them and returning the first failure of the range (a built-in
  /// model fails only when MuJoCo does, envs/mujoco/mujoco_env.hpp).
  virtual status step_range(size_t begin, size_t end, const float* actions) = 0;

  /// Sets environment i's generator words, float64 state and time-limit
  /// counter, already validated by the caller, and writes its observation row.
  virtual status restore_env(size_t i, const std::array<uint64_t, 4>& rng,
                             const double* state, int elapsed_steps) = 0;

  std::vector<float> observations_;
  std::vector<float> rewards_;
  std::vector<uint8_t> terminated_;
  std::vector<uint8_t> truncated_;
  std::vector<uint8_t> autoreset_;
  std::vector<double> reward_terms_;

private:
  status check_actions(const float* actions) const;

  env_spec spec_;
  size_t num_envs_;
  size_t obs_dim_;
  size_t action_dim_;
  size_t chunks_;
  bool ready_ = false;
  bool clip_box_actions_ = false;
  std::unique_ptr<base::worker_pool> pool_;
};

} // namespace troupe::envs
