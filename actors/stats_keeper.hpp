// The statistics keeper actor: owns named streams of running moments, merges
// the workers' moment deltas and publishes coalesced snapshots (docs/statistics.md).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <caf/all.hpp>

#include "actors/log.hpp"
#include "actors/messages.hpp"
#include "learners/stats_view.hpp"

namespace troupe::actors {

/// Settings of a statistics keeper.
struct stats_keeper_options {
  std::string mode = "cumulative";   ///< mode of streams declared by name only
  double momentum = 0.99;            ///< ema momentum for those streams
  uint64_t publish_every_merges = 8; ///< publish after this many merges...
  uint64_t publish_interval_ms =
    10; ///< ...or this long after an unpublished merge (0: never by time)
  size_t logged_rejections_per_worker = 10; ///< then only every 1000th is logged
  /// An experiment's control (stats.freeze_after): the first snapshot of a
  /// stream whose sample count reaches this is the last one published, and
  /// later subscribers get it too, so that every reader normalizes with
  /// fixed statistics from then on (the keeper's moments, and checkpoints,
  /// go on counting). 0: never.
  uint64_t freeze_after = 0;
  log_sink log; ///< rejection log; empty: nowhere
};

/// Spawns a statistics keeper.
caf::actor spawn_stats_keeper(caf::actor_system& sys, stats_keeper_options opts);

/// How long subscribe_view waits by default for the keeper's answer.
inline constexpr std::chrono::milliseconds subscribe_timeout{30000};

/// Creates a statistics view of `stream` fed by the keeper's snapshots: a
/// small feeder actor subscribes to the keeper and writes each snapshot into
/// the view. Returns once the view holds the keeper's answer to the
/// subscription (its current snapshot), so that an actor handed the view never
/// acts on the placeholder (version 0: mean 0, variance 1); waits at most
/// `timeout` for it, then fails naming the stream. Blocks the calling thread:
/// call it from a detached or blocking actor or a plain thread, never from an
/// event-based actor's handler. The feeder ends when the keeper ends or the
/// view is released.
result<std::shared_ptr<learners::stats_view>>
subscribe_view(caf::actor_system& sys, const caf::actor& keeper,
               const std::string& stream, size_t dim,
               std::chrono::milliseconds timeout = subscribe_timeout);

} // namespace troupe::actors
