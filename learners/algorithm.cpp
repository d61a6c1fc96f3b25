#include "learners/algorithm.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "learners/a3c.hpp"
#include "learners/impala.hpp"
#include "learners/ppo.hpp"

namespace troupe::learners {

// -- hyperparameters ---------------------------------------------------------

bool in_range(const hyperparameter& h, double x) noexcept {
  if (!std::isfinite(x))
    return false;
  if (h.min_exclusive ? !(x > h.min) : !(x >= h.min))
    return false;
  if (h.max_exclusive ? !(x < h.max) : !(x <= h.max))
    return false;
  if (h.type != hyperparameter_type::floating && x != std::floor(x))
    return false;
  return true;
}

std::string range_text(const hyperparameter& h) {
  return fmt::format("{}{}, {}{}", h.min_exclusive ? "(" : "[", h.min, h.max,
                     h.max_exclusive ? ")" : "]");
}

// -- the registry ------------------------------------------------------------

const std::vector<algorithm_info>& algorithms() {
  // One line per algorithm: its learners/<name>.hpp declares <name>_info().
  static const std::vector<algorithm_info> all = {
    ppo_info(),
    impala_info(),
    a3c_info(),
  };
  return all;
}

const algorithm_info* find_algorithm(const std::string& name) {
  for (auto& a : algorithms())
    if (name == a.name)
      return &a;
  return nullptr;
}

namespace {

std::string known_names() {
  std::string out;
  for (auto& a : algorithms())
    out += fmt::format("{}{}", out.empty() ? "" : ", ", a.name);
  return out;
}

} // namespace

result<std::unique_ptr<algorithm>> make_algorithm(const model_spec& spec,
                                                  const algorithm_settings& settings) {
  const algorithm_info* info = find_algorithm(settings.name);
  if (!info)
    return make_error(errc::invalid_argument, "unknown algorithm '{}' (known: {})",
                      settings.name, known_names());
  if (!(settings.gamma >= 0.0 && settings.gamma <= 1.0))
    return make_error(errc::invalid_argument, "{}: gamma = {} is outside [0, 1]",
                      info->name, settings.gamma);
  return info->make(spec, settings.gamma, settings.settings);
}

// -- shared steps ------------------------------------------------------------

void metrics_sum::add(const loss_report& r) {
  m.policy_loss += r.policy_loss;
  m.value_loss += r.value_loss;
  m.entropy += r.entropy;
  m.approx_kl += r.approx_kl;
  m.clip_fraction += r.clip_fraction;
  m.gradients += 1;
}

update_metrics metrics_sum::finish() const {
  update_metrics out = m;
  const double n = static_cast<double>(std::max<size_t>(m.gradients, 1));
  out.policy_loss /= n;
  out.value_loss /= n;
  out.entropy /= n;
  out.approx_kl /= n;
  out.clip_fraction /= n;
  return out;
}

void discrete_action_indices(const rollout_view& batch, std::vector<int64_t>& out) {
  const size_t rows = batch.rows();
  out.resize(rows);
  for (size_t k = 0; k < rows; ++k)
    out[k] = static_cast<int64_t>(batch.actions[k]);
}

void behavior_outputs::head_logp(const model_spec& spec, size_t rows,
                                 const int64_t* discrete_actions,
                                 const float* box_actions) {
  if (spec.action == action_kind::discrete)
    categorical_forward<float>(out.logits.data(), rows, static_cast<size_t>(spec.n),
                               discrete_actions, head);
  else
    gaussian_forward<float>(out.mean.data(), out.log_std.data(), rows,
                            static_cast<size_t>(spec.act_dim), box_actions, head);
  logp.assign(head.logp.begin(), head.logp.begin() + static_cast<ptrdiff_t>(rows));
}

status behavior_outputs::compute(const actor_critic& model, const rollout_view& batch,
                                 bool batch_statistics) {
  const size_t rows = batch.rows(), all = rows + batch.envs;
  if (auto ok = model.evaluate(batch.observations, all, nullptr, out, batch_statistics);
      !ok)
    return ok;
  values.assign(out.value.begin(), out.value.begin() + static_cast<ptrdiff_t>(all));
  const auto& spec = model.spec();
  if (spec.action == action_kind::discrete)
    discrete_action_indices(batch, actions_i64);
  head_logp(spec, rows, actions_i64.data(), batch.actions);
  return ok_status();
}

status behavior_outputs::compute_rows(const actor_critic& model,
                                      const float* observations, size_t rows,
                                      const int64_t* discrete_actions,
                                      const float* box_actions, bool batch_statistics) {
  if (auto ok = model.evaluate(observations, rows, nullptr, out, batch_statistics); !ok)
    return ok;
  values.assign(out.value.begin(), out.value.begin() + static_cast<ptrdiff_t>(rows));
  head_logp(model.spec(), rows, discrete_actions, box_actions);
  return ok_status();
}

} // namespace troupe::learners
