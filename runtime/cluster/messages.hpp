// The messages of a run across processes (docs/cluster.md): a worker's join
// request, the coordinator's welcome and the policy versions it pushes, with
// register_cluster_messages adding them to a config.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/policy_store.hpp"
#include "actors/raw_array.hpp"

namespace troupe::cluster {

/// Version of the join protocol; a worker of another version is refused.
constexpr uint32_t protocol_version = 9; // 9: batches and learner reports carry the
                                         // normalizer diagnostics (run.norm_diagnostics)

/// A worker's request to join a run (sent to the coordinator's gate).
struct join_request {
  uint32_t protocol = 0;            ///< protocol_version of the worker
  std::string name;                 ///< the worker's name (unique among live hosts)
  uint64_t incarnation = 0;         ///< random, new at every start of a worker
  uint64_t learners = 0;            ///< learners it will host
  uint64_t runners_per_learner = 0; ///< runners per learner
  std::string device;               ///< "auto", "cpu" or "cuda"
  std::string token;                ///< the run's shared secret
  caf::actor host;                  ///< its host actor: the group's forming, stop
  uint64_t guest_runners = 0;       ///< with learners = 0: runners feeding the learner
                                    ///< hosts' learners (an environment-only host)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, join_request& x) {
  return f(caf::meta::type_name("join_request"), x.protocol, x.name, x.incarnation,
           x.learners, x.runners_per_learner, x.device, x.token, x.host, x.guest_runners);
}

/// One policy version as raw float arrays (params, buffers).
struct policy_push {
  uint64_t version = 0;       ///< parameter server version
  std::vector<float> params;  ///< flat parameters
  std::vector<float> buffers; ///< flat buffers
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, policy_push& x) {
  return f(caf::meta::type_name("policy_push"), x.version, actors::raw(x.params),
           actors::raw(x.buffers));
}

/// The version `snap` as a policy_push (its weights copied).
policy_push policy_push_of(const actors::policy_snapshot& snap);

/// Where a learner host's feed door listens: the
/// door an environment-only host connects to, to feed that host's learners
/// and take its policy versions (docs/cluster.md, "Environment-only hosts").
struct door_info {
  std::string name; ///< the learner host's worker name ("coordinator": its own)
  std::string host; ///< the address it listens on (its cluster.data_interface)
  uint16_t port = 0;
  /// The coordinator's own door (a coordinator with learners in the group),
  /// reached through the connection to the gate: no host and port.
  caf::actor actor;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, door_info& x) {
  return f(caf::meta::type_name("door_info"), x.name, x.host, x.port, x.actor);
}

/// A learner host to the gate: (door_atom, token, door_info), its door is open.
/// The gate to an environment-only host: (doors_atom, std::vector<door_info>),
/// the doors open now.
using door_atom = caf::atom_constant<caf::atom("door")>;
using doors_atom = caf::atom_constant<caf::atom("doors")>;

/// The coordinator's answer to an accepted join.
struct welcome {
  std::string config_toml; ///< the run's resolved config
  uint64_t host_index = 0; ///< joins so far, from 0 (seeds differ per host)
  caf::actor keeper;       ///< the statistics keeper
  caf::actor server;       ///< the coordinator's replica or standby replica
  caf::actor metrics;      ///< the metrics actor
  std::vector<std::string> learner_names; ///< the names its learners must use
  policy_push weights;                    ///< the newest policy version
  std::string run; ///< the run's name (its folder's, cluster.json's "run")
  /// An environment-only host: the learner hosts' doors open now (its runners
  /// feed their learners).
  std::vector<door_info> doors;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, welcome& x) {
  return f(caf::meta::type_name("welcome"), x.config_toml, x.host_index, x.keeper,
           x.server, x.metrics, x.learner_names, x.weights, x.run, x.doors);
}

/// Registers the cluster's message types with `cfg` (after
/// actors::register_messages).
void register_cluster_messages(caf::actor_system_config& cfg);

} // namespace troupe::cluster
