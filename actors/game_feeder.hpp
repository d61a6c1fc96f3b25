// The game feeder: an actor in a learner's runner slot that answers the
// collect protocol with batches assembled from a segment queue, which a
// game-driven agent (edge/game_agent.hpp) fills; docs/embedding.md, "Inside
// the game-driven agent", describes both sides.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/log.hpp"
#include "actors/messages.hpp"
#include "base/error.hpp"

namespace troupe::actors {

/// T rows of one game slot, laid out as one column of a trajectory_batch.
struct game_segment {
  /// A version no row has used yet (the minimum of none).
  static constexpr uint64_t no_version = std::numeric_limits<uint64_t>::max();

  /// A segment of `steps` rows of `obs_dim` observations and `action_dim` actions.
  game_segment(size_t steps, size_t obs_dim, size_t action_dim);
  /// Empties it for reuse (the buffers keep their size).
  void reset();

  size_t rows = 0;            ///< complete rows
  size_t transitions = 0;     ///< rows that are transitions (not reset rows)
  std::vector<float> obs;     ///< [(T + 1) x obs_dim] as the policy saw them
  std::vector<float> raw;     ///< [T x obs_dim] as the game gave them
  std::vector<float> actions; ///< [T x action_dim]
  std::vector<float> logp;    ///< [T] behavior log-probabilities
  std::vector<float> rewards; ///< [T]
  std::vector<uint8_t> terminated, truncated, autoreset; ///< [T] each
  std::vector<double> episode_returns;   ///< episodes that ended in the segment
  std::vector<uint64_t> episode_lengths; ///< ... and their lengths
  uint64_t policy_version = no_version;  ///< the oldest a row acted with
  uint64_t stats_version = no_version;   ///< the oldest a row was normalized with
};

/// Settings of a segment queue.
struct segment_queue_options {
  std::string env_id = "game";  ///< named in batches
  size_t steps = 128;           ///< T: rows of a segment
  size_t obs_dim = 1;           ///< floats per observation
  size_t action_dim = 1;        ///< floats per action
  bool normalized = false;      ///< the segments' observations are normalized
  size_t capacity = 64;         ///< complete segments waiting, at most
  size_t writers = 1;           ///< segments being filled at a time (one per slot)
  bool block_when_full = false; ///< push waits for space (bounded)
  std::chrono::milliseconds block_timeout{100}; ///< the longest such wait
};

/// A bounded lock-free queue of complete segments (oldest first) with a pool
/// of segments to fill, and wakers that tell a waiting feeder a segment came.
class segment_queue {
public:
  /// Wakers (feeders) one queue can have.
  static constexpr size_t max_wakers = 64;

  /// A queue with every segment it will need allocated (capacity + writers +
  /// max_wakers of them).
  explicit segment_queue(segment_queue_options opts);
  ~segment_queue();
  segment_queue(const segment_queue&) = delete;
  segment_queue& operator=(const segment_queue&) = delete;

  /// The settings it was made with.
  const segment_queue_options& options() const noexcept { return opts_; }

  /// An empty segment to fill (any thread).
  game_segment* fresh();

  /// Queues complete segment `g` and wakes an armed waker; when the queue is
  /// full (after the bounded wait with block_when_full) returns false and
  /// the caller keeps `g`.
  bool push(game_segment* g);

  /// Takes the oldest segment into column `column` of `b` (sized for
  /// b.num_envs columns of T steps) and its raw observations into `raw`
  /// ([T x b.num_envs x obs_dim]); appends its episodes to
  /// b.episode_returns/lengths, lowers b.policy_version / b.stats_version to
  /// the segment's and sets b.normalized. False when the queue is empty. Any
  /// thread; several may take at once.
  bool take(trajectory_batch& b, size_t column, std::vector<float>& raw);

  /// Registers a waker (called on a pushing thread when a segment is queued
  /// while the waker is armed); returns its id, or SIZE_MAX when all
  /// max_wakers are taken.
  size_t add_waker(std::function<void()> wake);
  /// Arms waker `id`: the next queued segment calls it once. Arm, then look
  /// at the queue again: a segment queued in between is then not missed.
  void arm_waker(size_t id) noexcept;
  /// Disarms waker `id` (its feeder is ending).
  void disarm_waker(size_t id) noexcept;

  /// Ends every wait for space at once (the writer is closing).
  void close();

  struct impl;

private:
  segment_queue_options opts_;
  std::unique_ptr<impl> impl_;
};

/// Settings of a game feeder.
struct game_feeder_options {
  std::string name = "feeder";      ///< the runner slot's name: "<learner>.runner<i>"
  size_t num_envs = 1;              ///< segments per batch (columns)
  std::string stats_stream = "obs"; ///< keeper stream of observation moments
  log_sink log;                     ///< empty: nowhere
};

/// Spawns a feeder over `queue` for the learner `consumer` (it sends the
/// batches there), answering as an environment runner does:
///   (collect_atom, n) -> n    n batches of num_envs segments sent
///   (status_atom)     -> env_runner_status
///   (state_atom)      -> env_runner_state with no environments (nothing to
///                        restore: a resumed game starts fresh episodes)
/// `keeper` (may be invalid) receives the moments of each batch's raw
/// observations; the stream is declared first.
caf::actor spawn_game_feeder(caf::actor_system& sys, game_feeder_options opts,
                             std::shared_ptr<segment_queue> queue, caf::actor consumer,
                             caf::actor keeper = {});

} // namespace troupe::actors
