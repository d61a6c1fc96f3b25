// Every message type the actors exchange: plain structs with an `inspect`
// overload (so each one crosses processes and hosts unchanged), the atoms,
// and one function that registers them all with an actor system config.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "kernels/error.hpp"
#include "learners/stats_view.hpp"

namespace troupe::actors {

// -- atoms (CAF 0.17: at most 10 characters) ---------------------------------

using declare_atom = caf::atom_constant<caf::atom("declare")>;
using subscribe_atom = caf::atom_constant<caf::atom("subscribe")>;
using snapshot_atom = caf::atom_constant<caf::atom("snapshot")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
using save_atom = caf::atom_constant<caf::atom("save")>;
using load_atom = caf::atom_constant<caf::atom("load")>;
using publish_atom = caf::atom_constant<caf::atom("publish")>;
using sync_atom = caf::atom_constant<caf::atom("sync")>;
using pause_atom = caf::atom_constant<caf::atom("pause")>;

// -- statistics --------------------------------------------------------------

/// The moments of one batch (never a worker's accumulated state), sent by a
/// worker to the statistics keeper.
struct moments_delta {
  std::string stream;       ///< name of the statistics stream, e.g. "obs"
  std::string worker;       ///< who computed it, named in rejection logs
  uint64_t count = 0;       ///< samples in the batch
  std::vector<double> mean; ///< per-dimension batch mean
  std::vector<double> m2;   ///< per-dimension sum of squared deviations
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, moments_delta& x) {
  return f(caf::meta::type_name("moments_delta"), x.stream, x.worker, x.count,
           x.mean, x.m2);
}

/// A stream's declaration: name, dimension and mode.
struct stream_decl {
  std::string name;                ///< stream name
  uint64_t dim = 0;                ///< number of dimensions
  std::string mode = "cumulative"; ///< "cumulative" or "ema"
  double momentum = 0.99;          ///< ema only: weight of the running value
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stream_decl& x) {
  return f(caf::meta::type_name("stream_decl"), x.name, x.dim, x.mode,
           x.momentum);
}

/// Counters of one stream, for tests, metrics and logs.
struct stream_status {
  std::string name;         ///< stream name
  uint64_t dim = 0;         ///< number of dimensions
  uint64_t version = 0;     ///< merges applied (or loaded)
  uint64_t count = 0;       ///< samples merged
  uint64_t published = 0;   ///< version of the latest published snapshot
  uint64_t rejected = 0;    ///< deltas rejected
  std::map<std::string, uint64_t> rejected_by_worker; ///< worker -> rejected deltas
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stream_status& x) {
  return f(caf::meta::type_name("stream_status"), x.name, x.dim, x.version,
           x.count, x.published, x.rejected, x.rejected_by_worker);
}

// -- environment runner ------------------------------------------------------

using collect_atom = caf::atom_constant<caf::atom("collect")>;

/// A fixed-length batch of experience from one environment runner: T steps of
/// N environments, time-major ([t][env][...]). With next-step autoreset, a
/// step whose `autoreset` flag is set is a reset, not a transition: its
/// action was ignored, its reward is 0, and observations[t + 1] is the first
/// observation of a new episode.
struct trajectory_batch {
  std::string runner;              ///< name of the runner that collected it
  std::string env_id;              ///< environment id, e.g. "CartPole-v1"
  uint64_t sequence = 0;           ///< batch number from this runner, from 0
  uint64_t num_envs = 0;           ///< N
  uint64_t steps = 0;              ///< T
  uint64_t obs_dim = 0;            ///< floats per observation
  uint64_t action_dim = 0;         ///< floats per action
  std::vector<float> observations; ///< [(T + 1) x N x obs_dim] as the policy saw them
  std::vector<float> actions;      ///< [T x N x action_dim]
  std::vector<float> rewards;      ///< [T x N]
  std::vector<uint8_t> terminated; ///< [T x N]
  std::vector<uint8_t> truncated;  ///< [T x N]
  std::vector<uint8_t> autoreset;  ///< [T x N] the step was a reset
  std::vector<double> episode_returns;   ///< episodes that ended in this batch
  std::vector<uint64_t> episode_lengths; ///< their lengths in steps
  uint64_t policy_version = 0;     ///< policy version that chose the actions (oldest used)
  uint64_t stats_version = 0;      ///< statistics version used to normalize (0: none)
  bool normalized = false;         ///< observations are normalized
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, trajectory_batch& x) {
  return f(caf::meta::type_name("trajectory_batch"), x.runner, x.env_id, x.sequence,
           x.num_envs, x.steps, x.obs_dim, x.action_dim, x.observations, x.actions,
           x.rewards, x.terminated, x.truncated, x.autoreset, x.episode_returns,
           x.episode_lengths, x.policy_version, x.stats_version, x.normalized);
}

/// Counters of one environment runner.
struct env_runner_status {
  std::string runner;           ///< runner name
  std::string env_id;           ///< environment id
  uint64_t batches = 0;         ///< batches sent
  uint64_t env_steps = 0;       ///< environment steps taken (N per vector step)
  uint64_t episodes = 0;        ///< episodes finished
  uint64_t non_finite = 0;      ///< non-finite observations or rewards seen
  uint64_t deltas_sent = 0;     ///< moments deltas sent to the keeper
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, env_runner_status& x) {
  return f(caf::meta::type_name("env_runner_status"), x.runner, x.env_id, x.batches,
           x.env_steps, x.episodes, x.non_finite, x.deltas_sent);
}

// -- errors ------------------------------------------------------------------

/// CAF error category of troupe::errc values.
constexpr caf::atom_value error_category = caf::atom("troupe");

/// A troupe::error as a caf::error (code, category "troupe", message).
caf::error to_caf_error(const troupe::error& e);

/// The message text of a caf::error made by to_caf_error, or CAF's rendering.
std::string error_message(caf::actor_system& sys, const caf::error& e);

/// Registers every message type and the error category with `cfg`.
void register_messages(caf::actor_system_config& cfg);

} // namespace troupe::actors

namespace troupe::learners {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stats_snapshot& x) {
  return f(caf::meta::type_name("stats_snapshot"), x.stream, x.version,
           x.count, x.mean, x.var);
}

} // namespace troupe::learners
