// The statistics keeper actor: owns named streams of running moments, merges
// the moment deltas that workers send, and publishes versioned snapshots to
// subscribers, coalesced (every K merges or T milliseconds).
//
// Messages it handles (types in actors/messages.hpp):
//   (declare_atom, stream_decl)          -> uint64_t dim    declare a stream
//   moments_delta                        -> (none)          merge, or reject+count+log
//   (subscribe_atom, string stream)      -> stats_snapshot  and pushes snapshots after
//   (snapshot_atom, string stream)       -> stats_snapshot  current state, not coalesced
//   (status_atom, string stream)         -> stream_status   counters
//   (save_atom, string path)             -> ok_atom         state file (temp + rename)
//   (load_atom, string path)             -> ok_atom         replaces state, republishes
//   (sync_atom)                          -> sync_atom       FIFO barrier for a sender
//   (pause_atom)                         -> (none)          blocks on the debug gate
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include <caf/all.hpp>

#include "actors/log.hpp"
#include "actors/messages.hpp"
#include "learners/stats_view.hpp"

namespace troupe::actors {

/// A gate that a paused keeper waits on; for tests and `troupe bench stats`
/// (a keeper blocked on purpose). Closed gates block, open gates pass.
class keeper_gate {
public:
  /// Makes the next pause_atom block until open() is called.
  void close();
  /// Releases a keeper blocked on the gate.
  void open();
  /// Whether a keeper is currently blocked on the gate.
  bool has_waiter() const;
  /// Blocks while the gate is closed.
  void pass();

private:
  mutable std::mutex mtx_;
  std::condition_variable cv_;
  bool closed_ = false;
  bool waiting_ = false;
};

/// Settings of a statistics keeper.
struct stats_keeper_options {
  std::string mode = "cumulative";    ///< mode of streams declared by name only
  double momentum = 0.99;             ///< ema momentum for those streams
  uint64_t publish_every_merges = 8;  ///< publish after this many merges...
  uint64_t publish_interval_ms = 10;  ///< ...or this long after an unpublished merge (0: never by time)
  size_t logged_rejections_per_worker = 10; ///< then only every 1000th is logged
  log_sink log;                             ///< rejection log; default stderr
  std::shared_ptr<keeper_gate> gate;  ///< debug gate for pause_atom
};

/// Spawns a statistics keeper. `detached` gives it its own thread (so that a
/// paused keeper does not occupy a scheduler worker).
caf::actor spawn_stats_keeper(caf::actor_system& sys, stats_keeper_options opts,
                              bool detached = false);

/// Creates a statistics view of `stream` fed by the keeper's snapshots: a
/// small feeder actor subscribes to the keeper and writes each snapshot into
/// the view. The feeder ends when the keeper ends or the view is released.
std::shared_ptr<learners::stats_view>
subscribe_view(caf::actor_system& sys, const caf::actor& keeper,
               const std::string& stream, size_t dim);

} // namespace troupe::actors
