// Environment-only hosts feeding the learner hosts of the all-reduce data
// plane (docs/cluster.md, "Environment-only hosts"). Nothing here crosses the
// coordinator: a learner host opens a feed door on its data interface, and an
// environment-only host connects to the doors the gate names, hands each of
// its runners to one of them (a learner there then asks that runner for
// batches, which go straight to it) and takes the policy versions one door
// pushes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/log.hpp"
#include "actors/policy_store.hpp"
#include "runtime/cluster/messages.hpp"
#include "runtime/cluster/node.hpp"

namespace troupe::cluster {

/// Settings of a learner host's feed door.
struct door_options {
  std::string token; ///< the run's; a registration or subscription without it is refused
  std::string host;  ///< this host's worker name, for the log
  /// The host's supervisor, asked for its live learners at each registration.
  caf::actor supervisor;
  /// Where the host's replica publishes its versions (pushed to subscribers).
  std::shared_ptr<actors::policy_store> store;
  actors::log_sink log;
};

/// Spawns a learner host's door. It answers
/// - (runner_atom, token, name, runner, handoff) -> uint64_t: hands the guest
///   runner to one of the host's live learners (round robin; `handoff`, the
///   environment-only host's count of that runner's hand-offs, goes with it)
///   and answers that learner's index among them;
/// - (subscribe_atom, token, host_actor) -> uint64_t: pushes each new policy
///   version to host_actor as a policy_push, one under way at a time (the
///   newest goes next), and answers the version it holds now.
/// Publish it with publish_actor on the run's cluster.data_interface.
caf::actor spawn_door(caf::actor_system& sys, door_options opts);

/// Settings of an environment-only host's feed.
struct guest_feed_options {
  std::string token;            ///< the run's, given to every door
  std::string host;             ///< this host's worker name, for the log
  std::vector<door_info> doors; ///< the doors open when it joined
  node_settings node;           ///< how to connect (TLS)
  /// The host's actor that takes policy_push messages (the host's store).
  caf::actor policy_taker;
  actors::log_sink log;
};

/// Spawns an environment-only host's feed, the `feed_learners` of its guest
/// runners: each (runner_atom, name, runner) from the supervisor is handed to
/// the door with the fewest of this host's runners; (doors_atom,
/// std::vector<door_info>) from the gate replaces the list. A door whose host
/// is lost (its connection ends) has its runners handed to the others, and
/// the policy subscription moves too; runners without a door wait for one.
/// Each connection to a door is made on a thread of its own (it blocks).
caf::actor spawn_guest_feed(caf::actor_system& sys, guest_feed_options opts);

} // namespace troupe::cluster
