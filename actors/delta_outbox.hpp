// The delta outbox: one per host, between the host's local statistics senders
// (runners, learners) and the statistics keeper, which may be across a
// network. It gives every delta the host's identity (worker, incarnation,
// sequence), forwards it, and keeps what the keeper has not acknowledged, so
// that nothing is lost and nothing merges twice when the connection breaks.
//
// Per stream it keeps at most `max_unacked` sent, unacknowledged deltas;
// beyond that, new deltas are merged (Chan's parallel merge, exact for
// cumulative streams) into one held delta, sent as one sequence number when
// an ack makes room: memory stays bounded while the keeper is slow or away.
//
// Reconnect, (reconnect_atom, keeper): the outbox fences its current
// incarnation at the (new) keeper, whose answer is the final cumulative ack
// of that incarnation; it drops what the keeper merged, takes a new random
// incarnation, merges the rest of each stream (and any held delta) into ONE
// delta carrying the range [1, n] of the n local deltas it covers, and sends
// it. Fencing first makes the resend exact even when old messages are still
// on their way (a delayed or duplicated one of the old incarnation is
// dropped by the keeper). A resumed keeper that never saw the incarnation
// answers with no acks, and everything unacknowledged is resent.
//
// Messages it handles (types in actors/messages.hpp):
//   (declare_atom, stream_decl)         -> uint64_t dim  forwarded to the keeper
//   moments_delta                       -> (none)  stamped, forwarded, kept until acked
//                                          (its worker/incarnation/sequence are replaced)
//   delta_ack                           -> (none)  the keeper's pushed cumulative ack
//   (reconnect_atom, caf::actor keeper) -> uint64_t the new incarnation, once resent
//   (flush_atom)                        -> delta_outbox_status  after asking the keeper
//                                          for its acks (cumulative) and sending what
//                                          fits
//   (status_atom)                       -> delta_outbox_status
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
  log_sink log;                                ///< log; empty: nowhere
};

/// Spawns a delta outbox that sends to `keeper` (may be null: offline until
/// the first reconnect).
caf::actor spawn_delta_outbox(caf::actor_system& sys, delta_outbox_options opts,
                              caf::actor keeper);

/// A random nonzero incarnation id.
uint64_t random_incarnation();

} // namespace troupe::actors
