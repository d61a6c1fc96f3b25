// The coordinator's gate of a run across processes, the one actor a worker
// reaches over the network: it admits joins, forms the data plane's group,
// serves its rendezvous store and handles lost hosts (its messages:
// docs/design-notes.md, "runtime/").
#pragma once

#include <memory>
#include <string>

#include <caf/all.hpp>

#include "actors/log.hpp"
#include "actors/policy_store.hpp"
#include "actors/supervisor.hpp"
#include "runtime/cluster/data_plane.hpp"

namespace troupe::cluster {

/// Settings of the gate.
struct gate_options {
  std::string token;                           ///< the run's shared secret
  std::string config_toml;                     ///< the run's resolved config
  std::string run;                             ///< the run's name, told to each joiner
  actors::shared_actors cast;                  ///< keeper, server, metrics
  std::shared_ptr<actors::policy_store> store; ///< the newest version, for joiners
  uint64_t learners_per_host_max = 64;         ///< a join asking for more is refused
  uint64_t runners_per_learner = 1;            ///< the run's, for a join that asks 0
  actors::log_sink log; ///< joins, refusals, losses; empty: nowhere
  /// The coordinator's supervisor, told when a host spent the step budget.
  caf::actor supervisor;
  /// The data plane's keys.
  data_plane_settings plane;
  /// The coordinator's own place in the group (rank 0) when it has
  /// learners, formed with the others once plane.hosts worker hosts have
  /// joined (plane.hosts = 0: alone, as the gate starts).
  std::shared_ptr<deferred_group> own_group;
  /// The coordinator's own feed door (a coordinator with learners), named
  /// first to environment-only hosts and ended with the gate; null: none.
  caf::actor own_door;
};

/// A host of the run as the gate knew it when it was lost.
struct lost_host {
  std::string name;                  ///< the worker's name
  uint64_t incarnation = 0;          ///< its random incarnation id
  std::string address;               ///< "HOST:PORT" of its connection, or "unknown"
  std::vector<std::string> learners; ///< the learners it hosted
  uint64_t runners_per_learner = 0;  ///< their runners each
  uint64_t guest_runners = 0;        ///< an environment-only host: its runners
};

/// Called by the gate when a host is lost: fences the host's incarnation at
/// the statistics keeper and logs what it answered.
void on_host_lost(caf::event_based_actor* gate, const actors::shared_actors& cast,
                  const lost_host& host, const actors::log_sink& log);

/// Spawns the gate (publish it with caf::io::publish).
caf::actor spawn_gate(caf::actor_system& sys, gate_options opts);

} // namespace troupe::cluster
