// The environment interface, with Gymnasium's semantics: spaces, a float64
// internal state in `env.unwrapped.state`'s order and the registered time
// limit (docs/environments.md, "The interface").
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "envs/space.hpp"
#include "base/error.hpp"

namespace troupe::envs {

/// What an environment id stands for: spaces, time limit, state layout.
struct env_spec {
  std::string id;                       ///< Gymnasium id, e.g. "CartPole-v1"
  space observation_space;              ///< float32 Box
  space action_space;                   ///< Box or Discrete
  int max_episode_steps = 0;            ///< TimeLimit: truncated at this many steps
  std::vector<std::string> state_names; ///< names of the float64 state, in order
  bool early_truncation = false;        ///< may truncate before the time limit (a
                                        ///< game's own truncation; callback envs)
  /// Names of the per-step reward terms (as Gymnasium's `info` names them)
  /// that vector_env::reward_terms() holds, in its order; empty: none.
  std::vector<std::string> reward_terms{};
  /// Names of the trouble counters vector_env::counters() adds up, in its
  /// order (MuJoCo's warnings); empty: none.
  std::vector<std::string> counters{};

  /// Number of float64 values in the internal state.
  size_t state_dim() const noexcept { return state_names.size(); }
};

/// The outcome of one step, besides the observation.
struct step_result {
  double reward = 0;       ///< reward of the transition (float64, as Gymnasium's)
  bool terminated = false; ///< the MDP reached a terminal state
  bool truncated = false;  ///< the time limit was reached
};

/// One step with its observation, for callers that prefer values to buffers.
struct transition {
  std::vector<float> obs;  ///< observation after the step
  double reward = 0;       ///< reward of the transition
  bool terminated = false; ///< the MDP reached a terminal state
  bool truncated = false;  ///< the time limit was reached
};

/// One environment instance. Not thread-safe; use one per thread.
class env {
public:
  virtual ~env() = default;

  /// Id, spaces, time limit and state layout.
  virtual const env_spec& spec() const noexcept = 0;

  /// Reseeds the environment's generator with `seed`, draws an initial state
  /// and writes the first observation (observation_space.size() floats).
  virtual void reset(uint64_t seed, float* obs) = 0;

  /// Draws an initial state from the generator's current stream.
  virtual void reset(float* obs) = 0;

  /// Applies `action` (action_space.size() floats) and writes the next
  /// observation, failing without a change for an action outside the space
  /// or before the first reset or set_state.
  virtual result<step_result> step(const float* action, float* obs) = 0;

  /// Whether state(), set_state(), rng_state() and set_rng_state() work, so
  /// that a resumed run continues this environment mid-episode.
  virtual bool can_save_state() const noexcept { return true; }

  /// The internal state, float64, in Gymnasium's `env.unwrapped.state` order.
  virtual std::vector<double> state() const = 0;

  /// Replaces the internal state (spec().state_dim() finite values), leaving
  /// the time-limit counter as it is, and writes the new observation into
  /// `obs` when not null.
  virtual status set_state(const std::vector<double>& values, float* obs = nullptr) = 0;

  /// Steps taken since the last reset, as the TimeLimit wrapper counts them.
  virtual int elapsed_steps() const noexcept = 0;

  /// Sets the time-limit counter, as if `steps` steps had been taken.
  virtual void set_elapsed_steps(int steps) noexcept = 0;

  /// The four words of the environment's generator (base::rng::state):
  /// restoring them continues the stream the next reset draws from.
  virtual std::array<uint64_t, 4> rng_state() const noexcept = 0;

  /// Replaces the generator's four words; fails, changing nothing, on the
  /// all-zero state (which xoshiro256++ cannot leave).
  virtual status set_rng_state(const std::array<uint64_t, 4>& words) = 0;

  /// Whether step() accepts finite Box actions outside the bounds and lets
  /// the environment clip them (default false: such actions are rejected).
  void set_clip_box_actions(bool on) noexcept { clip_box_actions_ = on; }

  /// See set_clip_box_actions.
  bool clip_box_actions() const noexcept { return clip_box_actions_; }

  // -- value forms ----------------------------------------------------------

  /// reset(seed) returning the observation.
  std::vector<float> reset(uint64_t seed);

  /// step(action) returning the observation with the outcome; the action
  /// must have action_space.size() values.
  result<transition> step(const std::vector<float>& action);

private:
  bool clip_box_actions_ = false;
};

} // namespace troupe::envs
