// The statistics keeper actor: owns named streams of running moments, merges
// the moment deltas that workers send, and publishes versioned snapshots to
// subscribers, coalesced (every K merges or T milliseconds). Deltas that cross
// a network carry (worker, incarnation, sequence range): the keeper merges
// each at most once, in order per sender and stream; a delta that does not
// start right after the last merged one is dropped (not held: the sender
// keeps what is unacknowledged and resends it, merged, see delta_outbox.hpp).
// The per-sender table and the fenced incarnations are part of the state file.
//
// Messages it handles (types in actors/messages.hpp):
//   (declare_atom, stream_decl)          -> uint64_t dim    declare a stream
//   moments_delta                        -> (none)          merge, or reject+count+log;
//                                           a sequenced one (incarnation != 0) merges at
//                                           most once and in order per (worker,
//                                           incarnation, stream), else is dropped and
//                                           counted (duplicate, out of order, fenced),
//                                           and the keeper pushes a delta_ack (its
//                                           cumulative ack of that stream) to the sender
//   (ack_atom, string worker, uint64_t incarnation)   -> delta_acks  last merged per
//   stream (fence_atom, string worker, uint64_t incarnation) -> delta_acks  the final
//   acks: every
//                                           later delta of that incarnation is dropped
//   (subscribe_atom, string stream)      -> stats_snapshot  and pushes snapshots after
//   (snapshot_atom, string stream)       -> stats_snapshot  current state, not coalesced
//   (status_atom, string stream)         -> stream_status   counters
//   (status_atom)                        -> stream_status   every stream's counters
//                                           summed (name "*", dim 0), and the samples
//                                           merged per sequenced sender
//   (save_atom, string path)             -> ok_atom         state file (temp + rename)
//   (load_atom, string path)             -> ok_atom         replaces state, republishes
//   (sync_atom)                          -> sync_atom       FIFO barrier for a sender
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
  std::string mode = "cumulative";    ///< mode of streams declared by name only
  double momentum = 0.99;             ///< ema momentum for those streams
  uint64_t publish_every_merges = 8;  ///< publish after this many merges...
  uint64_t publish_interval_ms = 10;  ///< ...or this long after an unpublished merge (0: never by time)
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
