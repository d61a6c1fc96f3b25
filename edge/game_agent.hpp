// The game-driven agent: N slots that a game acts and reports through, each
// recording its transitions into segments for the learners' game feeders
// (docs/embedding.md, "Inside the game-driven agent").
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/game_feeder.hpp"
#include "actors/policy_store.hpp"
#include "base/error.hpp"
#include "learners/stats_view.hpp"

namespace troupe::edge {

/// Settings of a game agent.
struct game_agent_options {
  std::string name = "agent";     ///< named in messages
  std::string env_id = "game";    ///< named in batches
  size_t slots = 1;               ///< N agents the game drives
  size_t steps_per_segment = 128; ///< T: rows of one segment (a batch's column)
  size_t queue_capacity = 64;     ///< segments waiting for the learners, at most
  bool block_when_full = false;   ///< wait for space (bounded) instead of dropping
  std::chrono::milliseconds block_timeout{100}; ///< the longest such wait
  uint64_t seed = 0;         ///< slot s samples with a generator seeded seed + s
  double obs_epsilon = 1e-8; ///< added to the variance when normalizing
  double obs_clip = 10.0;    ///< normalized values clipped to +-this; 0: no clip
};

/// Counters of a game agent (sums over its slots).
struct game_agent_counters {
  uint64_t env_steps = 0;          ///< successful act() calls (slots acted)
  uint64_t transitions = 0;        ///< successful report() calls
  uint64_t segments = 0;           ///< segments queued for the learners
  uint64_t dropped = 0;            ///< transitions in segments dropped (queue full)
  uint64_t dropped_segments = 0;   ///< those segments
  uint64_t episodes = 0;           ///< episodes ended (terminated or truncated)
  double return_mean_100 = 0;      ///< mean return of the last 100 (0 before any)
  uint64_t policy_version = 0;     ///< newest policy version published to the agent
  uint64_t abandoned = 0;          ///< transitions discarded by abandon()
  uint64_t abandoned_episodes = 0; ///< episodes given up by abandon()
};

/// The N-slot agent a game drives: one thread per slot, any slots at once;
/// every call returns a status and a failed call changes nothing.
class game_agent {
public:
  /// An agent acting with the versions `store` publishes (its model must take
  /// observations as given: model_spec::obs_norm off) and normalizing with
  /// `views` (one per slot, each read by its slot only; empty: no
  /// normalization). Fails on options or views that do not fit.
  static result<std::shared_ptr<game_agent>>
  create(game_agent_options opts, std::shared_ptr<actors::policy_store> store,
         std::vector<std::shared_ptr<learners::stats_view>> views = {});

  ~game_agent();
  game_agent(const game_agent&) = delete;
  game_agent& operator=(const game_agent&) = delete;

  /// Acts for `slot`: reads obs[obs_dim()], writes action[action_dim()]
  /// (a discrete action as a float index). Reads the policy and statistics
  /// wait-free.
  status act(size_t slot, const float* obs, float* action);

  /// Acts for slots [first_slot, first_slot + count) in one forward pass:
  /// obs [count x obs_dim()], actions [count x action_dim()]. Checks every
  /// slot and observation first: on an error no slot acts.
  status act_batch(size_t first_slot, size_t count, const float* obs, float* actions);

  /// Completes the slot's transition begun by its act. `final_obs`
  /// (obs_dim() values, may be null) is the episode's last observation,
  /// used only when the episode ends here.
  status report(size_t slot, double reward, bool terminated, bool truncated,
                const float* final_obs = nullptr);

  /// Gives the slot up mid-episode (its game went away): the episode in
  /// progress ends without a terminal state and without an end of its own (its
  /// return is not counted), the slot's unfinished segment is discarded (its
  /// transitions counted in abandoned()), and a pending act is forgotten. The
  /// next act of the slot starts a new episode in a fresh segment. Segments of
  /// the episode already queued end where they end: bootstrapped, as any
  /// segment cut mid-episode. A call on the slot (thread contract as act).
  status abandon(size_t slot);

  /// Transitions discarded by abandon().
  uint64_t abandoned() const noexcept;

  /// The newest policy version published to the agent (what its next act uses).
  uint64_t policy_version() const noexcept;

  /// Ends the agent: every later call on it fails (errc::unavailable); the
  /// segments already queued stay for the feeders (a feeder waiting for more
  /// waits until its learner stops). Idempotent.
  void close();

  /// Whether close() was called.
  bool closed() const noexcept;

  /// N.
  size_t slots() const noexcept;
  /// Floats per observation.
  size_t obs_dim() const noexcept;
  /// Floats per action (1 for a discrete action).
  size_t action_dim() const noexcept;
  /// T.
  size_t steps_per_segment() const noexcept;
  /// The environment id named in batches.
  const std::string& env_id() const noexcept;

  /// Transitions dropped because the queue was full.
  uint64_t dropped() const noexcept;
  /// All counters (a consistent sum only while no slot is acting).
  game_agent_counters counters() const;

  /// The queue of complete segments, for the feeders (actors::spawn_game_feeder).
  const std::shared_ptr<actors::segment_queue>& queue() const noexcept;

  struct impl;

private:
  explicit game_agent(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// One statistics view per slot of an agent, each subscribed to `keeper`'s
/// `stream` (subscribe_view); blocks like subscribe_view.
result<std::vector<std::shared_ptr<learners::stats_view>>>
subscribe_agent_views(caf::actor_system& sys, const caf::actor& keeper,
                      const std::string& stream, size_t dim, size_t slots);

} // namespace troupe::edge
