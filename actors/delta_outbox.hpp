// The delta outbox: one per host, between its statistics senders and the keeper;
// it stamps, forwards and keeps every delta until acknowledged (docs/cluster.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <caf/all.hpp>

#include "actors/log.hpp"
#include "actors/messages.hpp"

namespace troupe::actors {

/// Settings of a delta outbox.
struct delta_outbox_options {
  std::string worker;        ///< the host's sender name (required)
  uint64_t incarnation = 0;  ///< first incarnation; 0: a random nonzero one
  uint64_t max_unacked = 64; ///< per stream: sent, unacknowledged deltas kept apart
  std::chrono::milliseconds ask_timeout{5000}; ///< every request to the keeper
  /// 0: each delta goes out when it comes (the window allowing); above 0: the
  /// deltas of each stream are merged for this long and go out as one, so the
  /// keeper merges one delta per stream per host per interval. Streams
  /// declared "ema" through the outbox are never paced: one merged delta
  /// would be one moving-average step where the keeper would have taken
  /// several.
  std::chrono::milliseconds interval{0};
  log_sink log; ///< log; empty: nowhere
};

/// Spawns a delta outbox that sends to `keeper` (may be null: offline until
/// the first reconnect).
caf::actor spawn_delta_outbox(caf::actor_system& sys, delta_outbox_options opts,
                              caf::actor keeper);

/// A random nonzero incarnation id.
uint64_t random_incarnation();

} // namespace troupe::actors
