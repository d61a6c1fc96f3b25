// Every message type the actors exchange: plain structs with an `inspect`
// overload (so each one crosses processes and hosts unchanged), the atoms,
// and one function that registers them all with an actor system config.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "envs/vector_env.hpp"
#include "actors/atoms.hpp"
#include "actors/raw_array.hpp"
#include "base/error.hpp"
#include "learners/stats_messages.hpp"
#include "learners/stats_view.hpp"

namespace troupe::actors {

// -- statistics --------------------------------------------------------------

// The statistics keeper's plain types live with its state (learners/stats_messages.hpp).
using moments_delta = learners::moments_delta;
using delta_acks = learners::delta_acks;
using stream_decl = learners::stream_decl;
using stream_status = learners::stream_status;

/// The keeper's cumulative acknowledgement of one sender's stream: every
/// sequence number up to `last` of (worker, incarnation, stream) is merged.
struct delta_ack {
  std::string worker;       ///< sender name
  uint64_t incarnation = 0; ///< sender incarnation
  std::string stream;       ///< stream name
  uint64_t last = 0;        ///< last merged sequence number (0: none)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, delta_ack& x) {
  return f(caf::meta::type_name("delta_ack"), x.worker, x.incarnation, x.stream, x.last);
}

/// Counters of a delta outbox (actors/delta_outbox.hpp).
struct delta_outbox_status {
  std::string worker;       ///< the host's sender name
  uint64_t incarnation = 0; ///< current incarnation (a new one after each reconnect)
  uint64_t received = 0;    ///< deltas received from local senders
  uint64_t sent = 0;        ///< deltas sent to the keeper (resends included)
  uint64_t resent = 0;      ///< merged resends sent at reconnects
  uint64_t unacked = 0;     ///< sent deltas not yet acknowledged, all streams
  uint64_t held = 0; ///< streams with merged deltas held back (window full or offline)
  uint64_t acked_samples = 0; ///< samples the keeper acknowledged as merged
  uint64_t acked_deltas = 0;  ///< local deltas the keeper acknowledged as merged
  bool connected = false;     ///< a keeper is set and no reconnect is under way
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, delta_outbox_status& x) {
  return f(caf::meta::type_name("delta_outbox_status"), x.worker, x.incarnation,
           x.received, x.sent, x.resent, x.unacked, x.held, x.acked_samples,
           x.acked_deltas, x.connected);
}

// -- environment runner ------------------------------------------------------

/// A fixed-length batch of experience from one environment runner: T steps of
/// N environments, time-major ([t][env][...]). With next-step autoreset, a
/// step whose `autoreset` flag is set is a reset, not a transition: its
/// action was ignored, its reward is 0, and observations[t + 1] is the first
/// observation of a new episode.
struct trajectory_batch {
  std::string runner;                  ///< name of the runner that collected it
  std::string env_id;                  ///< environment id, e.g. "CartPole-v1"
  uint64_t sequence = 0;               ///< batch number from this runner, from 0
  uint64_t num_envs = 0;               ///< N
  uint64_t steps = 0;                  ///< T
  uint64_t obs_dim = 0;                ///< floats per observation
  uint64_t action_dim = 0;             ///< floats per action
  std::vector<float> observations;     ///< [(T + 1) x N x obs_dim] as the policy saw them
  std::vector<float> actions;          ///< [T x N x action_dim]
  std::vector<float> behavior_logp;    ///< [T x N] log-probability of each chosen action
  std::vector<float> rewards;          ///< [T x N]
  std::vector<uint8_t> terminated;     ///< [T x N]
  std::vector<uint8_t> truncated;      ///< [T x N]
  std::vector<uint8_t> autoreset;      ///< [T x N] the step was a reset
  std::vector<double> episode_returns; ///< episodes that ended in this batch
  std::vector<uint64_t> episode_lengths; ///< their lengths in steps
  uint64_t policy_version = 0; ///< policy version that chose the actions (oldest used)
  uint64_t stats_version = 0;  ///< statistics version used to normalize (0: none)
  bool normalized = false;     ///< observations are normalized
  /// Version of the return statistics the rewards were divided by (reward
  /// normalization; 0: rewards are raw).
  uint64_t reward_stats_version = 0;
  /// The rows were acted with several policy versions (a game-driven batch):
  /// PPO takes its old log-probabilities from behavior_logp, not from
  /// recomputing version policy_version (learner.hpp).
  bool behavior_recorded = false;
  /// [episodes x K] per finished episode (in episode_returns' order), the sum
  /// of each of the environment's K reward terms (env_spec::reward_terms);
  /// a row of NaN for an episode whose start the runner did not see (it
  /// continued from a saved state). Empty when the environment has none.
  std::vector<double> episode_reward_terms;
  /// The environment's trouble counters (env_spec::counters) gained while
  /// collecting this batch; empty when it has none.
  std::vector<uint64_t> env_counters;
  /// run.norm_diagnostics (env_runner_options), measured before this batch
  /// on the previous one's raw observations; NaN where not measured.
  /// The policy's mean KL (nats) across the change of the observation
  /// normalizer the runner acts with, since its previous batch (0: unchanged).
  double obs_shift_kl = NAN;
  /// The policy's mean KL between the runner's own observation normalizer
  /// and the global one (0 when it acts with the global one).
  double obs_drift_kl = NAN;
  /// |ln| of the ratio of the return standard deviation the rewards are
  /// divided by, now against the previous batch.
  double return_std_shift = NAN;
  /// ln(the runner's return standard deviation / the global one); 0 when it
  /// uses the global one.
  double return_std_drift = NAN;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, trajectory_batch& x) {
  return f(caf::meta::type_name("trajectory_batch"), x.runner, x.env_id, x.sequence,
           x.num_envs, x.steps, x.obs_dim, x.action_dim, raw(x.observations),
           raw(x.actions), raw(x.behavior_logp), raw(x.rewards), x.terminated,
           x.truncated, x.autoreset, raw(x.episode_returns), raw(x.episode_lengths),
           x.policy_version, x.stats_version, x.normalized, x.reward_stats_version,
           x.behavior_recorded, raw(x.episode_reward_terms), raw(x.env_counters),
           raw_value(x.obs_shift_kl), raw_value(x.obs_drift_kl),
           raw_value(x.return_std_shift), raw_value(x.return_std_drift));
}

/// Counters of one environment runner.
struct env_runner_status {
  std::string runner;       ///< runner name
  std::string env_id;       ///< environment id
  uint64_t batches = 0;     ///< batches sent
  uint64_t env_steps = 0;   ///< environment steps taken (N per vector step)
  uint64_t episodes = 0;    ///< episodes finished
  uint64_t non_finite = 0;  ///< non-finite observations or rewards seen
  uint64_t deltas_sent = 0; ///< moments deltas sent to the keeper
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, env_runner_status& x) {
  return f(caf::meta::type_name("env_runner_status"), x.runner, x.env_id, x.batches,
           x.env_steps, x.episodes, x.non_finite, x.deltas_sent);
}

/// Everything an environment runner's future batches depend on, taken between
/// two batches ((state_atom) -> env_runner_state): a runner started from it
/// (env_runner_options::start_state) over a vector env of the same id and
/// size continues exactly as the runner it was taken from. For environments
/// that cannot save their state (env.with_state false) it continues the
/// counters and the policy's generator, and starts fresh episodes.
struct env_runner_state {
  std::string runner;                   ///< name of the runner it was taken from
  std::string env_id;                   ///< environment id, e.g. "CartPole-v1"
  envs::vector_env_state env;           ///< every environment, generators included
  std::array<uint64_t, 4> gen{};        ///< the policy generator's words (not all zero)
  std::vector<double> episode_return;   ///< [N] return of each episode under way
  std::vector<uint64_t> episode_length; ///< [N] its length in steps
  /// [N] reward normalization's discounted return of each environment, or
  /// empty (none kept: all 0).
  std::vector<double> discounted_return;
  env_runner_status status; ///< counters; status.batches is the next
                            ///< batch's sequence number
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, env_runner_state& x) {
  return f(caf::meta::type_name("env_runner_state"), x.runner, x.env_id, x.env, x.gen,
           x.episode_return, x.episode_length, x.discounted_return, x.status);
}

/// Whether `s` is the state of a stand-in with nothing to restore (a
/// game-driven feeder: no environments of its own); checkpoints leave it out.
inline bool nothing_to_restore(const env_runner_state& s) {
  return s.env.num_envs == 0;
}

// -- training: parameter server, learner, metrics ----------------------------

/// One learner's gradient for the parameter server. With incarnation != 0 the
/// server applies it at most once per (worker, incarnation, learner, sequence)
/// and refuses it once (worker, incarnation) is fenced; incarnation 0 is
/// unsequenced (in-process learners).
struct gradient_update {
  std::string learner;       ///< who computed it
  uint64_t base_version = 0; ///< version of the weights it was computed on
  uint64_t samples = 0;      ///< rows it was computed from (weight of the mean)
  double learning_rate = 0;  ///< the learner's scheduled learning rate
  std::vector<float> grad;   ///< param_count numbers
  std::vector<float>
    buffers; ///< local batch norm: the learner's running stats (may be empty)
  uint64_t batch_env_steps = 0; ///< on a batch's last gradient: the batch's env steps
  std::string worker{};         ///< host/sender name (empty: the learner's name)
  uint64_t incarnation = 0; ///< random nonzero id of the sender's life; 0: unsequenced
  uint64_t sequence = 0;    ///< 1, 2, 3... per (worker, incarnation, learner)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gradient_update& x) {
  return f(caf::meta::type_name("gradient_update"), x.learner, x.base_version, x.samples,
           x.learning_rate, raw(x.grad), raw(x.buffers), x.batch_env_steps, x.worker,
           x.incarnation, x.sequence);
}

/// A learner that takes its own optimizer steps (the only learner of a sync
/// run in one process, learner_options::local_optimizer) hands the server
/// the outcome of one batch: the weights and Adam's state after its `steps`
/// steps, taken from version `base_version`. The server installs them as
/// versions base_version + 1 .. base_version + steps in one go (it answers
/// with a weights_reply); a base that is not its version is refused
/// (rejected), and the learner takes the server's state again.
struct local_steps {
  std::string learner;          ///< who took the steps
  uint64_t base_version = 0;    ///< the server's version they started from
  uint64_t steps = 0;           ///< optimizer steps taken (gradients applied)
  uint64_t rejected = 0;        ///< gradients not applied: a non-finite number
  uint64_t batch_env_steps = 0; ///< the batch's environment steps
  int64_t adam_steps = 0;       ///< Adam's step counter after them
  std::vector<float> params;    ///< the weights after them
  std::vector<float> buffers;   ///< batch-norm running statistics (may be empty)
  std::vector<float> adam_m;    ///< Adam's first moments after them
  std::vector<float> adam_v;    ///< Adam's second moments after them
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, local_steps& x) {
  return f(caf::meta::type_name("local_steps"), x.learner, x.base_version, x.steps,
           x.rejected, x.batch_env_steps, x.adam_steps, raw(x.params), raw(x.buffers),
           raw(x.adam_m), raw(x.adam_v));
}

/// The parameter server's weights at one version.
struct weights_reply {
  uint64_t version = 0;  ///< optimizer steps applied
  bool applied = true;   ///< false when the gradient was dropped as stale
  bool draining = false; ///< the run is stopping: nothing is applied any more
  bool rejected =
    false; ///< the gradient held a non-finite number, or was fenced: not applied
  std::vector<float> params;  ///< flat parameters
  std::vector<float> buffers; ///< flat buffers (batch-norm running statistics)
  bool duplicate =
    false; ///< its (worker, incarnation, learner, sequence) was seen: not applied again
  bool fenced =
    false; ///< its (worker, incarnation) is fenced: refused (rejected is set too)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, weights_reply& x) {
  return f(caf::meta::type_name("weights_reply"), x.version, x.applied, x.draining,
           x.rejected, raw(x.params), raw(x.buffers), x.duplicate, x.fenced);
}

/// Counters of the parameter server.
struct parameter_server_status {
  uint64_t version = 0;            ///< optimizer steps applied
  uint64_t received = 0;           ///< gradients received
  uint64_t applied = 0;            ///< gradients that went into a step
  uint64_t dropped = 0;            ///< gradients dropped as staler than max_staleness
  uint64_t max_staleness_seen = 0; ///< largest staleness of a received gradient
  uint64_t batches = 0;   ///< batches whose last gradient was applied (or dropped)
  uint64_t env_steps = 0; ///< their environment steps: the counters a checkpoint keeps
  uint64_t rejected = 0;  ///< gradients rejected for a non-finite number (never applied)
  std::map<std::string, uint64_t> rejected_by_learner; ///< the same, by learner name
  uint64_t duplicates = 0; ///< sequenced gradients seen before: not applied again
  uint64_t fenced = 0;     ///< gradients refused from a fenced incarnation
  std::map<std::string, uint64_t> fenced_by_worker;   ///< the same, by worker name
  std::map<std::string, uint64_t> rejected_by_worker; ///< non-finite ones, by worker name
  uint64_t members = 0; ///< sync: learners the step under way waits for
  std::map<std::string, uint64_t> applied_by_learner; ///< applied gradients, by learner
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, parameter_server_status& x) {
  return f(caf::meta::type_name("parameter_server_status"), x.version, x.received,
           x.applied, x.dropped, x.max_staleness_seen, x.batches, x.env_steps, x.rejected,
           x.rejected_by_learner, x.duplicates, x.fenced, x.fenced_by_worker,
           x.rejected_by_worker, x.members, x.applied_by_learner);
}

/// Everything the parameter server owns, for checkpoints.
struct parameter_server_state {
  uint64_t version = 0;             ///< optimizer steps applied
  int64_t adam_steps = 0;           ///< Adam's step counter
  std::vector<float> params;        ///< flat parameters
  std::vector<float> buffers;       ///< flat buffers
  std::vector<float> adam_m;        ///< Adam first moments
  std::vector<float> adam_v;        ///< Adam second moments
  parameter_server_status counters; ///< counters
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, parameter_server_state& x) {
  return f(caf::meta::type_name("parameter_server_state"), x.version, x.adam_steps,
           x.params, x.buffers, x.adam_m, x.adam_v, x.counters);
}

/// What a learner reports to the metrics actor after learning one batch.
struct learner_report {
  std::string learner;                   ///< who learned
  uint64_t env_steps = 0;                ///< environment steps in the batch
  std::vector<double> episode_returns;   ///< episodes that ended in the batch
  std::vector<uint64_t> episode_lengths; ///< their lengths
  uint64_t policy_lag = 0;    ///< weights version when learning minus acting version
  uint64_t stats_version = 0; ///< statistics version the batch was normalized with
  uint64_t stats_lag = 0;     ///< latest published statistics version minus that
  uint64_t reward_stats_version = 0; ///< return statistics version its rewards used
  uint64_t weights_version = 0;      ///< parameter server version after the batch
  double loss_policy = 0;            ///< mean over the batch's gradient steps
  double loss_value = 0;             ///< mean over the batch's gradient steps
  double entropy = 0;                ///< mean over the batch's gradient steps
  double learning_rate = 0;          ///< learning rate of the batch
  uint64_t dropped = 0;              ///< gradients of this batch dropped as stale
  uint64_t rejected = 0;             ///< gradients of this batch rejected as non-finite
  uint64_t runner_restarts = 0;      ///< runner restarts so far (this learner)
  uint64_t non_finite = 0; ///< non-finite values dropped so far (this learner's runners)
  bool skipped = false;    ///< the batch was not learned (non-finite values)
  /// The batch's trajectory_batch::episode_reward_terms ([episodes x K]).
  std::vector<double> episode_reward_terms;
  /// The batch's trajectory_batch::env_counters (also when skipped).
  std::vector<uint64_t> env_counters;
  /// The batch's normalizer diagnostics (trajectory_batch::obs_shift_kl and
  /// the rest; NaN where not measured).
  double obs_shift_kl = NAN;
  double obs_drift_kl = NAN;
  double return_std_shift = NAN;
  double return_std_drift = NAN;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, learner_report& x) {
  return f(caf::meta::type_name("learner_report"), x.learner, x.env_steps,
           x.episode_returns, x.episode_lengths, x.policy_lag, x.stats_version,
           x.stats_lag, x.reward_stats_version, x.weights_version, x.loss_policy,
           x.loss_value, x.entropy, x.learning_rate, x.dropped, x.rejected,
           x.runner_restarts, x.non_finite, x.skipped, x.episode_reward_terms,
           x.env_counters, raw_value(x.obs_shift_kl), raw_value(x.obs_drift_kl),
           raw_value(x.return_std_shift), raw_value(x.return_std_drift));
}

/// The metrics actor's counters: what a checkpoint keeps and a resume restores.
struct metrics_counters {
  uint64_t env_steps = 0;               ///< environment steps learned from
  uint64_t updates = 0;                 ///< batches learned (one PPO iteration each)
  uint64_t episodes = 0;                ///< episodes finished
  double wall_time_s = 0;               ///< training time so far, resumed runs included
  std::vector<double> recent_returns;   ///< the last 100 episode returns, oldest first
  std::vector<uint64_t> recent_lengths; ///< their lengths
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, metrics_counters& x) {
  return f(caf::meta::type_name("metrics_counters"), x.env_steps, x.updates, x.episodes,
           x.wall_time_s, x.recent_returns, x.recent_lengths);
}

/// A learner's random state: its minibatch-shuffling generator.
struct learner_state {
  std::string learner;           ///< learner name
  std::array<uint64_t, 4> gen{}; ///< the generator's words
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, learner_state& x) {
  return f(caf::meta::type_name("learner_state"), x.learner, x.gen);
}

/// Held runners and how many batches each had sent (their next sequence
/// number): a learner asked with it answers once it has learned them all.
struct held_runners {
  std::vector<std::string> names;      ///< runner names
  std::vector<uint64_t> next_sequence; ///< per name: batches it had sent
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, held_runners& x) {
  return f(caf::meta::type_name("held_runners"), x.names, x.next_sequence);
}

/// The random states of a whole cast, for checkpoints: every runner's state
/// (environments, generators, episodes under way) and every learner's.
struct cast_snapshot {
  std::vector<env_runner_state> runners; ///< one per live runner
  std::vector<learner_state> learners;   ///< one per learner
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cast_snapshot& x) {
  return f(caf::meta::type_name("cast_snapshot"), x.runners, x.learners);
}

/// The supervisor's counters.
struct supervisor_status {
  uint64_t runners = 0;         ///< runners alive
  uint64_t runner_restarts = 0; ///< runner restarts so far
  uint64_t learners_alive = 0;  ///< learners not yet ended
  bool stopping = false;        ///< a stop was requested or something failed
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, supervisor_status& x) {
  return f(caf::meta::type_name("supervisor_status"), x.runners, x.runner_restarts,
           x.learners_alive, x.stopping);
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
typename Inspector::result_type inspect(Inspector& f, moments_delta& x) {
  return f(caf::meta::type_name("moments_delta"), x.stream, x.worker, x.count,
           troupe::actors::raw(x.mean), troupe::actors::raw(x.m2), x.incarnation,
           x.seq_first, x.seq_last);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, delta_acks& x) {
  return f(caf::meta::type_name("delta_acks"), x.worker, x.incarnation, x.fenced, x.last);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stream_decl& x) {
  return f(caf::meta::type_name("stream_decl"), x.name, x.dim, x.mode, x.momentum);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stream_status& x) {
  return f(caf::meta::type_name("stream_status"), x.name, x.dim, x.version, x.count,
           x.published, x.rejected, x.rejected_by_worker, x.duplicates,
           x.duplicates_by_worker, x.out_of_order, x.fenced, x.fenced_by_worker,
           x.samples_by_sender);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stats_snapshot& x) {
  return f(caf::meta::type_name("stats_snapshot"), x.stream, x.version, x.count,
           troupe::actors::raw(x.mean), troupe::actors::raw(x.var));
}

} // namespace troupe::learners

namespace troupe::envs {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, vector_env_state& x) {
  return f(caf::meta::type_name("vector_env_state"), x.env_id, x.num_envs, x.with_state,
           x.rng, x.state, x.elapsed_steps, x.rewards, x.terminated, x.truncated,
           x.autoreset);
}

} // namespace troupe::envs
