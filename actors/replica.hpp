// One host's replica of the parameter server (docs/cluster.md, "The data
// plane"): it takes its own learners' gradients as the parameter server does,
// sums them per round, all-reduces the sums with the other hosts' replicas
// through a collective, and applies the identical result with its own Adam,
// so the weights stay bit-identical on every host.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/collective.hpp"
#include "actors/log.hpp"
#include "actors/messages.hpp"
#include "actors/policy_store.hpp"
#include "learners/optimizer.hpp"

namespace troupe::actors {

/// Settings of a replica.
struct replica_options {
  /// Sync mode (DD-PPO): a round waits for one gradient of each of this
  /// host's `num_learners` learners and answers them with the round's
  /// weights. Async mode: a gradient is answered at once, and a learner has at
  /// most one gradient in a round (a second one waits for the next round).
  bool sync = false;
  uint64_t num_learners = 1;  ///< sync: this host's learners in each round
  uint64_t max_staleness = 4; ///< async: drop gradients older than this many versions
  double max_grad_norm = 0.5; ///< clip of the round's mean gradient; <= 0: none
  learners::adam_config adam; ///< Adam settings (lr is the round's mean lr)
  /// Async: a host without a gradient enters the next round after this long,
  /// with nothing, so that the others' round can complete.
  std::chrono::microseconds idle_round{2000};
  std::string host; ///< this host's name in messages
  log_sink log;     ///< empty: nowhere
};

/// Counters of a replica's rounds.
struct replica_status {
  uint64_t rounds = 0;        ///< rounds completed
  uint64_t empty_rounds = 0;  ///< of them, rounds without any gradient on any host
  uint64_t contributed = 0;   ///< this host's gradients sent into rounds
  uint64_t held = 0;          ///< async: gradients that waited for the next round
  uint64_t weights_hash = 0;  ///< hash of the weights after the last round
  uint64_t round_ns_sum = 0;  ///< time from a round's start to its result, summed
  uint64_t round_ns_max = 0;  ///< the longest round
  uint64_t group_size = 0;    ///< hosts in the group
  uint64_t reduced_bytes = 0; ///< bytes this host handed to the all-reduce
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, replica_status& x) {
  return f(caf::meta::type_name("replica_status"), x.rounds, x.empty_rounds,
           x.contributed, x.held, x.weights_hash, x.round_ns_sum, x.round_ns_max,
           x.group_size, x.reduced_bytes);
}

/// Asks a replica for its replica_status (the parameter server's counters
/// stay behind status_atom).
using rounds_atom = caf::atom_constant<caf::atom("rounds")>;

/// The hash a round carries: of the parameters and buffers, as bytes.
uint64_t weights_hash(const std::vector<float>& params,
                      const std::vector<float>& buffers);

/// Spawns a replica (on its own thread) that starts from `params` and
/// `buffers` (version 0), or from `start` (a checkpoint's state), and
/// all-reduces through `group`. Its first exchange in a group hands every
/// member the state of the member that completed the most rounds (rank 0's
/// at a run's start). `store` (may be null) receives every version. A round
/// that fails sends the replica into the group's next epoch
/// (collective::reform); weights that differ between hosts, or a group that
/// cannot form again, end it with an error that says which.
caf::actor spawn_replica(caf::actor_system& sys, replica_options opts,
                         std::shared_ptr<collective> group, std::vector<float> params,
                         std::vector<float> buffers,
                         std::shared_ptr<policy_store> store = nullptr,
                         std::optional<parameter_server_state> start = std::nullopt);

/// Settings of a standby replica.
struct standby_options {
  /// How long it waits for its source (set later with source_atom) to answer.
  std::chrono::milliseconds ask_timeout{5000};
  std::string host; ///< this host's name in messages
  log_sink log;     ///< empty: nowhere
};

/// Sets a standby replica's source: (source_atom, caf::actor).
using source_atom = caf::atom_constant<caf::atom("source")>;

/// Spawns a standby replica: the parameter server's place on a host that
/// takes no part in the rounds (a coordinator with no learners of its own,
/// docs/cluster.md). It holds the newest state it was given, starting from
/// `params` and `buffers` at version 0 with Adam at zero, or from `start` (a
/// checkpoint's), and publishes each to `store` (may be null).
///
/// - (state_atom) and (rounds_atom) ask its source, when one is set, for a
///   member's state (a parameter_server_state) or replica_status, keep it
///   when it is not older than what it holds, and answer it; when the source
///   fails or is unset, what it holds.
/// - (state_atom, parameter_server_state) and (rounds_atom, replica_status)
///   give it one (an older one is ignored); a state of another model's size
///   is refused, naming both sizes.
/// - (status_atom) answers the counters of the state it holds; join, leave
///   and fence answer 0 (no learner of this host steps with it), and a
///   gradient is refused, naming the learner.
caf::actor
spawn_standby_replica(caf::actor_system& sys, standby_options opts,
                      std::vector<float> params, std::vector<float> buffers,
                      std::shared_ptr<policy_store> store = nullptr,
                      std::optional<parameter_server_state> start = std::nullopt);

} // namespace troupe::actors
