// The game-driven agent: a game loop that owns time acts and reports through
// N slots (one agent each), and the learners train from what it reports.
//
// Game side (game_agent):
//   act(slot, obs, action)       normalizes obs with the latest global
//                                statistics and samples an action from the
//                                latest policy, at once
//   act_batch(first, count, ...) the same for `count` consecutive slots, one
//                                forward pass
//   report(slot, reward, terminated, truncated, final_obs)
//                                completes the slot's transition
//
// What act reads. Each slot keeps its own latest-value slot
// (base/latest_value.hpp) of the policy, filled by the policy store when
// the parameter server publishes a version, and its own statistics view
// (learners/stats_view.hpp) fed by the statistics keeper. Both are read
// wait-free: no lock, no message, no allocation once the slot's buffers have
// grown (the first act of a slot allocates them); a stalled trainer makes the
// policy and the statistics older, never act slower. The slot records, per
// step, the observation as the policy saw it (normalized), the raw one (for
// the statistics), the action, its log-probability under the policy that
// chose it (the behavior policy: PPO's ratio and V-trace correct for the lag
// with it) and that policy's version. Box actions are returned unclipped (as
// sampled): the game clips them to its bounds. (report takes a mutex only
// when an episode ends, to note its return for counters(); a call that
// queues a segment wakes a waiting feeder with one message.)
//
// Thread contract. One thread per slot: calls for one slot never overlap.
// Different slots may be driven from different threads at the same time.
// act_batch(first, count) counts as a call on each of its slots. Counters and
// close() may be called from any thread. Every call returns a status: a bad
// argument (slot out of range, null pointer, a non-finite observation or
// reward, report without a preceding act, act twice without a report, any
// call after close) is an error naming the call, the slot, the rule and the
// value, and changes nothing: the slot is as it was, the agent keeps running.
//
// Segments and episodes. T steps of a slot (steps_per_segment) make a
// segment, laid out as an environment runner lays out one environment's
// column of a trajectory_batch (actors/messages.hpp) with next-step
// autoreset: when an episode ends (terminated or truncated), the row after
// its last transition is a reset row (autoreset = 1, action 0, log-prob 0,
// reward 0) whose observation is the episode's final observation: `final_obs`
// when the game gives it, else the last observation acted on. (That is an
// approximation for truncation: the bootstrap value is then V(s_t) of the last
// state acted on instead of V(s_{t+1}); give final_obs when episodes are cut
// by a time limit. A terminated episode is not bootstrapped, so it loses
// nothing.) The next act of the slot then starts the new episode. A segment
// is complete when its T rows are and the observation after them is known
// (the next act, or the final observation of a reset row that starts the
// next segment).
//
// Queue, drops and lag. Complete segments go into one bounded lock-free queue
// (queue_capacity segments, Boost.Lockfree) shared by all slots, from which
// the feeders take them in order. When the queue is full, the segment is
// dropped and counted (dropped(): its transitions; the slot goes on with a
// fresh segment): the game is never blocked by training. With
// block_when_full, the call that completes the segment waits for space at
// most block_timeout, then drops. A segment waits in the queue for a learner:
// the policy and statistics versions it was acted and normalized with may be
// older than the learner's, which is what the recorded log-probabilities are
// for. A slot whose thread stops calling stops contributing segments; the
// other slots are not affected. A feeder that ends (stopped, or replaced
// with its learner) loses the segments of the batch it was assembling.
//
// Feeder side (spawn_game_feeder): an actor that stands in a learner's runner
// slot. The learner asks it for batches, (collect_atom, n), as it asks an
// environment runner; the feeder takes num_envs segments from the queue as
// the columns of one [T x num_envs] batch (behavior_recorded set, policy
// version and statistics version the oldest of its rows), sends the moments
// of the batch's raw observations to the statistics keeper (only batches that
// are used; never non-finite ones), and sends the batch to the learner. When
// the queue has too few segments it waits: the game's call that queues a
// segment wakes it with one message (guarded by an atomic flag, so only a
// feeder that is waiting is woken; nothing polls).
//   (collect_atom, uint64_t n) -> uint64_t  n batches sent (to its consumer)
//   (status_atom)              -> env_runner_status
//   (state_atom)               -> env_runner_state with no environments:
//                                 nothing to restore (nothing_to_restore();
//                                 checkpoints leave it out; a resumed game
//                                 starts fresh episodes)
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/log.hpp"
#include "actors/messages.hpp"
#include "actors/policy_store.hpp"
#include "base/error.hpp"
#include "learners/stats_view.hpp"

namespace troupe::actors {

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
  uint64_t env_steps = 0;        ///< successful act() calls (slots acted)
  uint64_t transitions = 0;      ///< successful report() calls
  uint64_t segments = 0;         ///< segments queued for the learners
  uint64_t dropped = 0;          ///< transitions in segments dropped (queue full)
  uint64_t dropped_segments = 0; ///< those segments
  uint64_t episodes = 0;         ///< episodes ended (terminated or truncated)
  double return_mean_100 = 0;    ///< mean return of the last 100 (0 before any)
  uint64_t policy_version = 0;   ///< newest policy version published to the agent
  uint64_t abandoned = 0;        ///< transitions discarded by abandon()
  uint64_t abandoned_episodes = 0; ///< episodes given up by abandon()
};

/// The N-slot agent a game drives (see the file comment for the contract).
class game_agent {
public:
  /// An agent acting with the versions `store` publishes (its model must take
  /// observations as given: model_spec::obs_norm off) and normalizing with
  /// `views` (one per slot, each read by its slot only; empty: no
  /// normalization). Fails on options or views that do not fit.
  static result<std::shared_ptr<game_agent>>
  create(game_agent_options opts, std::shared_ptr<policy_store> store,
         std::vector<std::shared_ptr<learners::stats_view>> views = {});

  ~game_agent();
  game_agent(const game_agent&) = delete;
  game_agent& operator=(const game_agent&) = delete;

  /// Acts for `slot`: reads obs[obs_dim()], writes action[action_dim()]
  /// (a discrete action as a float index). Wait-free reads, see above.
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

  // -- feeder side (spawn_game_feeder; tests) ---------------------------------

  /// Takes the oldest queued segment into column `column` of `b` (sized for
  /// b.num_envs columns of T steps: observations, actions, logp, rewards,
  /// flags) and its raw observations into `raw` ([T x b.num_envs x obs_dim]);
  /// appends its episodes to b.episode_returns/lengths and lowers
  /// b.policy_version / b.stats_version to the segment's. False when the
  /// queue is empty. Any thread; feeders may take concurrently.
  bool take_segment(trajectory_batch& b, size_t column, std::vector<float>& raw);

  /// Registers a waker (called on a game thread when a segment is queued
  /// while the waker is armed); returns its id.
  size_t add_waker(std::function<void()> wake);
  /// Arms waker `id`: the next queued segment calls it once. Arm, then look
  /// at the queue again: a segment queued in between is then not missed.
  void arm_waker(size_t id) noexcept;
  /// Disarms waker `id` (its feeder is ending).
  void disarm_waker(size_t id) noexcept;

  struct impl;

private:
  explicit game_agent(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// Settings of a game feeder.
struct game_feeder_options {
  std::string name = "feeder";      ///< the runner slot's name: "<learner>.runner<i>"
  size_t num_envs = 1;              ///< segments per batch (columns)
  std::string stats_stream = "obs"; ///< keeper stream of observation moments
  log_sink log;                     ///< empty: nowhere
};

/// Spawns a feeder over `agent` for the learner `consumer` (it sends the
/// batches there). `keeper` (may be invalid) receives the moments of each
/// batch's raw observations; the stream is declared first.
caf::actor spawn_game_feeder(caf::actor_system& sys, game_feeder_options opts,
                             std::shared_ptr<game_agent> agent, caf::actor consumer,
                             caf::actor keeper = {});

/// One statistics view per slot of an agent, each subscribed to `keeper`'s
/// `stream` (subscribe_view); blocks like subscribe_view.
result<std::vector<std::shared_ptr<learners::stats_view>>>
subscribe_agent_views(caf::actor_system& sys, const caf::actor& keeper,
                      const std::string& stream, size_t dim, size_t slots);

} // namespace troupe::actors
