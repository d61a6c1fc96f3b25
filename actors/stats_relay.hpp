// A host's one subscriber to the statistics keeper of a run across processes
// (docs/cluster.md, "What crosses the wire"). Without it every view on a
// worker (one per learner and runner) subscribes to the coordinator's keeper
// itself, and each snapshot crosses the wire once per view. The relay
// subscribes to a stream once, when the first local view asks for it, keeps
// the newest snapshot, and hands each snapshot it receives to the host's
// views. It answers (subscribe_atom, stream) and (snapshot_atom, stream) as the
// keeper does, so subscribe_view works against it unchanged; it ends when the
// keeper goes (and so do its views' feeders, which monitor it).
#pragma once

#include <caf/all.hpp>

namespace troupe::actors {

/// Spawns the relay of `keeper` (a proxy of the coordinator's keeper).
caf::actor spawn_stats_relay(caf::actor_system& sys, caf::actor keeper);

} // namespace troupe::actors
