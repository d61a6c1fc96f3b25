// A learning algorithm as one module (hyperparameters, batch requirements,
// update, metrics) that the learner actor drives without naming it; adding
// one is described in docs/training.md, "Adding an algorithm".
#pragma once

#include <any>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/rng.hpp"
#include "learners/backend.hpp"
#include "learners/hyperparameters.hpp"
#include "learners/losses.hpp"
#include "learners/model.hpp"

namespace troupe::learners {

// -- settings ----------------------------------------------------------------

/// What a learner is told to run: an algorithm by name, the settings every
/// algorithm shares, and the algorithm's own typed settings.
struct algorithm_settings {
  std::string name = "ppo"; ///< a name of algorithms()
  double gamma = 0.99;      ///< discount ([algo] gamma)
  std::any settings; ///< the algorithm's struct (ppo_settings, ...); empty: its defaults
};

/// The `S` that `s` holds, made S{} first when it holds none or settings of
/// another type (tests and programs set fields by name:
/// settings_of<ppo_settings>(s).update_epochs = 1).
template <class S>
S& settings_of(algorithm_settings& s) {
  if (!std::any_cast<S>(&s.settings))
    s.settings = S{};
  return *std::any_cast<S>(&s.settings);
}

// -- batches -----------------------------------------------------------------

/// A trajectory batch as an algorithm sees it, not owned: `steps` x `envs`
/// transitions stored time-major ([t * envs + e]) with Gymnasium's next-step
/// autoreset (actors/messages.hpp, trajectory_batch).
struct rollout_view {
  size_t steps = 0;                    ///< steps per environment
  size_t envs = 0;                     ///< environments
  size_t obs_dim = 0;                  ///< floats per observation
  size_t action_dim = 0;               ///< floats per action (1 for a discrete action)
  const float* observations = nullptr; ///< [(steps + 1) * envs x obs_dim]; the
                                       ///< last envs rows are the bootstrap rows
  const float* actions = nullptr;      ///< [steps * envs x action_dim]
  const float* rewards = nullptr;      ///< [steps * envs]
  const uint8_t* terminated = nullptr; ///< [steps * envs]
  const uint8_t* truncated = nullptr;  ///< [steps * envs]
  const uint8_t* autoreset = nullptr;  ///< [steps * envs]
  /// Log-probability of each action when it was chosen; may be null.
  const float* behavior_logp = nullptr;
  size_t behavior_logp_count = 0; ///< how many behavior_logp holds (0 or rows())
  /// The rows were acted with several policy versions (a game-driven batch),
  /// so behavior_logp is the only record of the acting policy.
  bool behavior_recorded = false;
  /// The acting weights handed to algorithm::update are the version the
  /// batch was acted with (false: the learner's current ones, so a recorded
  /// behavior_logp is kept rather than recomputed).
  bool acting_version_kept = true;

  /// steps * envs.
  size_t rows() const noexcept { return steps * envs; }
};

// -- updates -----------------------------------------------------------------

/// The settings of the steps a learner applies itself.
struct local_step_settings {
  double lr = 0;            ///< learning rate of this batch's steps
  double max_grad_norm = 0; ///< clipping threshold (<= 0: none)
};

/// What an update draws on, supplied by the learner actor: the backend that
/// computes losses and gradients, the shuffling generator, and the way each
/// gradient leaves (to the parameter server) and the new weights arrive.
class update_host {
public:
  virtual ~update_host() = default;
  /// The compute the losses run on.
  virtual learner_backend& backend() = 0;
  /// The generator minibatches are shuffled with.
  virtual base::rng& generator() = 0;
  /// Loads the latest weights into the backend; call before every gradient.
  virtual status load_weights() = 0;
  /// Sends the backend's last gradient (of `samples` rows; `last` for the
  /// batch's last, which carries its environment steps) and takes the
  /// weights answered.
  virtual status push_gradient(size_t samples, bool last) = 0;
  /// Where the learner applies its own gradients and nobody else's weights
  /// come between its minibatches (a lone learner whose optimizer is local):
  /// the settings of its steps, so that a whole update can run in the
  /// backend (learner_backend::ppo_update); otherwise nullopt.
  virtual std::optional<local_step_settings> local_steps() { return std::nullopt; }
  /// Ends a batch whose update the backend ran whole: `taken` steps were
  /// applied and `rejected` gradients refused (non-finite), in place of the
  /// batch's push_gradient calls.
  virtual status finish_local_update(size_t taken, size_t rejected) {
    (void)taken;
    (void)rejected;
    return make_error(errc::unavailable, "this learner takes its gradients one by one");
  }
};

/// What an update reports (the learner's report and metrics.csv carry it):
/// the mean of its losses over its gradients.
struct update_metrics {
  double policy_loss = 0;   ///< mean policy loss
  double value_loss = 0;    ///< mean value loss (before its coefficient)
  double entropy = 0;       ///< mean entropy
  double approx_kl = 0;     ///< PPO: mean over gradients of mean((ratio - 1) - log ratio)
  double clip_fraction = 0; ///< PPO: mean over gradients of the clipped rows' fraction
  size_t gradients = 0;     ///< gradients sent
};

/// One algorithm, with the scratch space of one learner (not shared between
/// learners: each learner makes its own with make_algorithm).
class algorithm {
public:
  virtual ~algorithm() = default;

  /// Its name in algorithms() and the config ("ppo").
  virtual const char* name() const noexcept = 0;

  /// Whether the batch's old log-probabilities and values come from the
  /// weights it was acted with (true) or from the current weights (false).
  virtual bool uses_acting_weights() const noexcept = 0;

  /// Checks a run's batches of `rows` transitions before anything starts,
  /// the error naming the algorithm, the rule and the numbers.
  virtual status check_batch_size(size_t rows) const = 0;

  /// Checks that `batch` meets the algorithm's requirements; the error names
  /// the algorithm, the rule and the numbers (the learner skips the batch).
  virtual status check_batch(const rollout_view& batch) const = 0;

  /// Learns `batch` on host.backend(), sending each gradient with
  /// host.push_gradient, with `acting` the weights of the old
  /// log-probabilities and values; an error means the learner cannot go on.
  virtual result<update_metrics>
  update(const rollout_view& batch, const actor_critic& acting, update_host& host) = 0;
};

// -- the registry ------------------------------------------------------------

/// An algorithm as the registry lists it (made by declare_algorithm).
struct algorithm_info {
  const char* name = ""; ///< "ppo": the value of [algo] name and the section [algo.ppo]
  const char* summary = "";                    ///< one line
  std::vector<hyperparameter> hyperparameters; ///< its section's keys, from its fields
  /// Its settings struct, every field read with `read`; the error names a
  /// value out of range.
  std::function<result<std::any>(const hyperparameter_reader& read)> read;
  /// Makes one from its settings struct (empty: the defaults); the error
  /// names a field out of range, or settings of another algorithm.
  std::function<result<std::unique_ptr<algorithm>>(const model_spec& spec, double gamma,
                                                   const std::any& settings)>
    make;
};

/// The registry's entry of an algorithm whose settings are `S`, declared
/// once by `fields`; `make` builds one from checked settings.
template <class S>
algorithm_info declare_algorithm(const char* name, const char* summary,
                                 std::vector<field<S>> fields,
                                 std::unique_ptr<algorithm> (*make)(const model_spec&,
                                                                    double, const S&)) {
  algorithm_info info;
  info.name = name;
  info.summary = summary;
  for (const auto& f : fields)
    info.hyperparameters.push_back(describe_field(f));
  auto shared = std::make_shared<const std::vector<field<S>>>(std::move(fields));
  info.read = [name, shared](const hyperparameter_reader& read) -> result<std::any> {
    auto s = read_settings<S>(name, *shared, read);
    if (!s)
      return s.err();
    return std::any(std::move(*s));
  };
  info.make = [name, shared,
               make](const model_spec& spec, double gamma,
                     const std::any& settings) -> result<std::unique_ptr<algorithm>> {
    const S defaults{};
    const S* s = settings.has_value() ? std::any_cast<S>(&settings) : &defaults;
    if (!s)
      return make_error(errc::invalid_argument,
                        "{}: the settings given are another algorithm's ({}), not {}'s",
                        name, settings.type().name(), name);
    if (auto ok = check_settings<S>(name, *shared, *s); !ok)
      return ok.err();
    return make(spec, gamma, *s);
  };
  return info;
}

/// Every algorithm, in the order they are described.
const std::vector<algorithm_info>& algorithms();

/// The algorithm called `name`; nullptr when there is none.
const algorithm_info* find_algorithm(const std::string& name);

/// Makes the algorithm of `settings` for a model of `spec`; the error names
/// an unknown algorithm (and the known ones), settings of another algorithm,
/// a field out of range or a discount outside [0, 1].
result<std::unique_ptr<algorithm>> make_algorithm(const model_spec& spec,
                                                  const algorithm_settings& settings);

// -- shared steps ------------------------------------------------------------

/// Log-probabilities of a batch's actions under `model` and its values, as the
/// algorithms compute them from the weights that acted (or the current ones).
struct behavior_outputs {
  policy_output out;                ///< the forward pass
  head_cache<float> head;           ///< the head's log-probabilities
  std::vector<int64_t> actions_i64; ///< discrete actions as indices
  std::vector<float> values;        ///< [(steps + 1) * envs] V(x_t) and bootstrap
  std::vector<float> logp;          ///< [steps * envs] log pi(a_t | x_t)

  /// Evaluates `model` on every row of `batch` (the bootstrap rows' values
  /// too) and each action's log-probability, batch norm normalizing with all
  /// these rows' statistics when `batch_statistics` is set.
  status compute(const actor_critic& model, const rollout_view& batch,
                 bool batch_statistics = false);

  /// Evaluates `model` on `rows` observations with `discrete_actions` or
  /// `box_actions` (the other null) into `rows` values and logp, batch norm
  /// normalizing with these rows' statistics when `batch_statistics` is set.
  status compute_rows(const actor_critic& model, const float* observations, size_t rows,
                      const int64_t* discrete_actions, const float* box_actions,
                      bool batch_statistics);

private:
  // The head's log-probabilities of the first `rows` rows of `out`.
  void head_logp(const model_spec& spec, size_t rows, const int64_t* discrete_actions,
                 const float* box_actions);
};

/// Sums loss reports into update_metrics; finish() turns sums into means.
struct metrics_sum {
  update_metrics m;
  /// Adds one gradient's report.
  void add(const loss_report& r);
  /// The means.
  update_metrics finish() const;
};

/// Copies a batch's discrete actions (floats, the vector env's format) into
/// `out` as indices.
void discrete_action_indices(const rollout_view& batch, std::vector<int64_t>& out);

} // namespace troupe::learners
