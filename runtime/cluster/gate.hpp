// The coordinator's gate of a run across processes (docs/cluster.md): the
// one actor a worker reaches over the network. It checks a worker's join
// (protocol version, token in constant time, a name no live host uses),
// answers with the welcome (the resolved config, the keeper, server and
// metrics handles, the learner names, the newest weights; for an
// environment-only host, the coordinator's learners its runners feed),
// monitors the
// worker's host actor, and pushes each new policy version to every host (one
// push in flight per host; a host that is behind gets the newest version,
// never the ones in between). In sync mode a joining host's learners are
// announced to the parameter server (join_atom: they take part from the next
// step). A lost host is logged ("lost host NAME (ADDRESS): it hosted ..."),
// counted and handed to on_host_lost.
//
// Messages it handles:
//   join_request -> welcome, or an error that says why it was refused
//   (actors::publish_atom, uint64_t version)  a new version in the store
//   (actors::stop_atom) -> caf::ok_atom   tells every host the run ends;
//                          answers once every host has gone (the caller
//                          bounds the wait)
//   (actors::status_atom) -> (uint64_t hosts, uint64_t hosts_lost)
// Every host answers a push with its host_progress (the environment steps its
// runners collected and those that left its hands); when a host is lost,
// the difference at its last answer is counted as env steps lost.
// It sends to the metrics actor (actors::hosts_atom, hosts, hosts_lost,
// env_steps_lost) at every change.
#pragma once

#include <memory>
#include <string>

#include <caf/all.hpp>

#include "actors/log.hpp"
#include "actors/policy_store.hpp"
#include "actors/supervisor.hpp"

namespace troupe::cluster {

/// Settings of the gate.
struct gate_options {
  std::string token;                           ///< the run's shared secret
  std::string config_toml;                     ///< the run's resolved config
  std::string run;                             ///< the run's name, told to each joiner
  actors::shared_actors cast;                  ///< keeper, server, metrics
  std::shared_ptr<actors::policy_store> store; ///< where the server publishes versions
  uint64_t learners_per_host_max = 64;         ///< a join asking for more is refused
  uint64_t runners_per_learner = 1;            ///< the run's, for a join that asks 0
  actors::log_sink log; ///< joins, refusals, losses; empty: nowhere
  bool sync = false; ///< algo.mode = "sync": learners join and leave the server's steps
  /// The coordinator's supervisor: asked for its learners (learners_atom)
  /// when an environment-only host joins; null: such hosts are refused.
  caf::actor supervisor;
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

/// Called by the gate when a host is lost, after logging and counting it:
/// fences the host's incarnation at the statistics keeper and the parameter
/// server (fence_atom), so that whatever that incarnation still sends (a
/// frozen host that wakes, a message still on its way) is refused and
/// counted, never merged or applied; then, when `sync`, tells the server that
/// its learners leave (leave_atom: a sync step completes with the learners
/// still alive);
/// logs what each answered.
void on_host_lost(caf::event_based_actor* gate, const actors::shared_actors& cast,
                  const lost_host& host, bool sync, const actors::log_sink& log);

/// Spawns the gate (publish it with caf::io::publish).
caf::actor spawn_gate(caf::actor_system& sys, gate_options opts);

} // namespace troupe::cluster
