#include "learners/losses.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "base/error.hpp"
#include "kernels/policy_heads.hpp"

namespace troupe::learners {

namespace {

// Forward of both networks and the head; `actions_rows` rows carry actions
// (the V-trace bootstrap rows do not).
template <class T>
void forward_all(const model_spec& spec, const model_layout& layout, const T* params,
                 T* buffers, const T* obs, size_t rows, size_t action_rows,
                 const int64_t* discrete_actions, const T* box_actions,
                 const train_options& options, loss_workspace<T>& ws,
                 ppo_part part = ppo_part::both) {
  if (part != ppo_part::critic)
    network_forward(layout.actor, spec, params, buffers, obs, rows, forward_mode::train,
                    ws.actor);
  if (part != ppo_part::actor)
    network_forward(layout.critic, spec, params, buffers, obs, rows, forward_mode::train,
                    ws.critic);
  if (part == ppo_part::critic)
    return; // a part runs only without batch norm (ppo_loss_and_grad checks)
  const size_t head = static_cast<size_t>(spec.head_dim());
  if (spec.action == action_kind::discrete)
    categorical_forward(ws.actor.out.data(), action_rows, head, discrete_actions,
                        ws.head);
  else
    gaussian_forward(ws.actor.out.data(), params + layout.log_std, action_rows, head,
                     box_actions, ws.head);
  if (part == ppo_part::actor)
    return;
  if (options.batch_moments) {
    options.batch_moments->clear();
    batch_norm_moments(layout.actor, ws.actor, *options.batch_moments);
    batch_norm_moments(layout.critic, ws.critic, *options.batch_moments);
  }
  if (spec.batch_norm == batch_norm_mode::local && options.update_running_stats) {
    update_running_stats(layout.actor, spec, ws.actor, buffers);
    update_running_stats(layout.critic, spec, ws.critic, buffers);
  }
}

// Backward from the per-row dL/dlogp, dL/dH (first action_rows rows) and
// dL/dV (all rows).
template <class T>
void backward_all(const model_spec& spec, const model_layout& layout, const T* params,
                  size_t rows, size_t action_rows, const int64_t* discrete_actions,
                  loss_workspace<T>& ws, T* grad, ppo_part part = ppo_part::both) {
  if (part == ppo_part::critic) {
    network_backward(layout.critic, spec, params, ws.critic, ws.d_value.data(), grad);
    return;
  }
  const size_t head = static_cast<size_t>(spec.head_dim());
  ws.d_head.assign(rows * head, T{0});
  if (spec.action == action_kind::discrete)
    categorical_backward(ws.head, action_rows, head, discrete_actions, ws.d_logp.data(),
                         ws.d_entropy.data(), ws.d_head.data());
  else
    gaussian_backward(ws.head, params + layout.log_std, action_rows, head,
                      ws.d_logp.data(), ws.d_entropy.data(), ws.d_head.data(),
                      grad + layout.log_std);
  network_backward(layout.actor, spec, params, ws.actor, ws.d_head.data(), grad);
  if (part == ppo_part::both)
    network_backward(layout.critic, spec, params, ws.critic, ws.d_value.data(), grad);
}

} // namespace

// -- PPO ---------------------------------------------------------------------

template <class T>
void normalize_advantages(const T* in, size_t rows, T* out) {
  if (rows < 2) {
    std::copy(in, in + rows, out);
    return;
  }
  double mean = 0;
  for (size_t r = 0; r < rows; ++r)
    mean += static_cast<double>(in[r]);
  mean /= static_cast<double>(rows);
  double ss = 0;
  for (size_t r = 0; r < rows; ++r)
    ss += (static_cast<double>(in[r]) - mean) * (static_cast<double>(in[r]) - mean);
  const double std = std::sqrt(ss / static_cast<double>(rows - 1)); // torch.std: unbiased
  for (size_t r = 0; r < rows; ++r)
    out[r] = static_cast<T>((static_cast<double>(in[r]) - mean) / (std + 1e-8));
}

template <class T>
loss_report ppo_loss_and_grad(const model_spec& spec, const model_layout& layout,
                              const T* params, T* buffers, const ppo_batch<T>& batch,
                              const ppo_config& config, const train_options& options,
                              loss_workspace<T>& ws, T* grad, ppo_part part) {
  TROUPE_CHECK(part == ppo_part::both || spec.batch_norm == batch_norm_mode::none,
               "ppo_loss_and_grad: a share of the loss needs a model without batch norm");
  const bool actor = part != ppo_part::critic;
  const bool critic = part != ppo_part::actor;
  const size_t rows = batch.rows;
  forward_all(spec, layout, params, buffers, batch.obs, rows, rows,
              batch.discrete_actions, batch.box_actions, options, ws, part);

  if (actor) {
    // Advantages are data: normalizing them changes no gradient formula.
    ws.advantages.resize(rows);
    if (config.normalize_advantages)
      normalize_advantages(batch.advantages, rows, ws.advantages.data());
    else
      ws.advantages.assign(batch.advantages, batch.advantages + rows);
    ws.d_logp.resize(rows);
    ws.d_entropy.resize(rows);
  }
  if (critic)
    ws.d_value.resize(rows);
  const T inv_rows = T{1} / static_cast<T>(rows);
  const T c = static_cast<T>(config.clip_coef);
  const T vf = static_cast<T>(config.vf_coef);
  const T* values = ws.critic.out.data();
  double pg_sum = 0, v_sum = 0, ent_sum = 0, kl_sum = 0;
  size_t clipped = 0;
  if constexpr (std::is_same_v<T, float>) {
    // Training: the kernels' CPU twin (kernels/policy_heads.hpp), the code
    // the CUDA twin is tested against.
    kernels::ppo_term_constants k;
    k.clip = c;
    k.vf_coef = vf;
    k.ent_coef = static_cast<float>(config.ent_coef);
    k.inv_rows = inv_rows;
    k.clip_value_loss = config.clip_value_loss;
    ws.terms.resize(rows * 5);
    if (part == ppo_part::both)
      kernels::ppo_terms(ws.head.logp.data(), ws.head.entropy.data(), values,
                         batch.old_logprob, ws.advantages.data(), batch.returns,
                         batch.old_values, rows, k, ws.d_logp.data(), ws.d_entropy.data(),
                         ws.d_value.data(), ws.terms.data());
    else if (actor)
      kernels::ppo_policy_terms(ws.head.logp.data(), ws.head.entropy.data(),
                                batch.old_logprob, ws.advantages.data(), rows, k,
                                ws.d_logp.data(), ws.d_entropy.data(), ws.terms.data());
    else
      kernels::ppo_value_terms(values, batch.returns, batch.old_values, rows, k,
                               ws.d_value.data(), ws.terms.data());
    for (size_t r = 0; r < rows; ++r) {
      const float* t = ws.terms.data() + r * 5;
      if (actor) {
        pg_sum += t[0];
        ent_sum += t[2];
        kl_sum += t[3];
        clipped += t[4] > 0.0f;
      }
      if (critic)
        v_sum += t[1];
    }
  } else {
    // The float64 reference: the same formulas written out.
    for (size_t r = 0; r < rows && actor; ++r) {
      const T log_ratio = ws.head.logp[r] - batch.old_logprob[r];
      const T ratio = std::exp(log_ratio);
      const T adv = ws.advantages[r];
      const T unclipped = -adv * ratio;
      const T clipped_term = -adv * std::clamp(ratio, T{1} - c, T{1} + c);
      // When the clipped term is larger the ratio sits outside [1-c, 1+c],
      // where the clip is flat: no gradient.
      const bool take_unclipped = unclipped >= clipped_term;
      pg_sum += static_cast<double>(take_unclipped ? unclipped : clipped_term);
      ws.d_logp[r] = take_unclipped ? -adv * ratio * inv_rows : T{0};
      kl_sum += static_cast<double>((ratio - T{1}) - log_ratio);
      clipped += std::abs(ratio - T{1}) > c;
      ent_sum += static_cast<double>(ws.head.entropy[r]);
      ws.d_entropy[r] = -static_cast<T>(config.ent_coef) * inv_rows;
    }
    for (size_t r = 0; r < rows && critic; ++r) {
      const T v = values[r];
      const T err = v - batch.returns[r];
      if (config.clip_value_loss) {
        const T delta = v - batch.old_values[r];
        const T v_clipped = batch.old_values[r] + std::clamp(delta, -c, c);
        const T err_clipped = v_clipped - batch.returns[r];
        if (err * err >= err_clipped * err_clipped) {
          v_sum += static_cast<double>(err * err);
          ws.d_value[r] = vf * err * inv_rows;
        } else {
          v_sum += static_cast<double>(err_clipped * err_clipped);
          const bool inside = delta > -c && delta < c;
          ws.d_value[r] = inside ? vf * err_clipped * inv_rows : T{0};
        }
      } else {
        v_sum += static_cast<double>(err * err);
        ws.d_value[r] = vf * err * inv_rows;
      }
    }
  }
  loss_report report;
  const double n = static_cast<double>(rows);
  if (actor) {
    report.policy_loss = pg_sum / n;
    report.entropy = ent_sum / n;
    report.approx_kl = kl_sum / n;
    report.clip_fraction = static_cast<double>(clipped) / n;
  }
  if (critic)
    report.value_loss = 0.5 * v_sum / n;
  report.loss = report.policy_loss + config.vf_coef * report.value_loss -
                config.ent_coef * report.entropy;

  backward_all(spec, layout, params, rows, rows, batch.discrete_actions, ws, grad, part);
  return report;
}

loss_report ppo_merge_parts(const loss_report& actor, const loss_report& critic,
                            const ppo_config& config) noexcept {
  loss_report report = actor;
  report.value_loss = critic.value_loss;
  report.loss = report.policy_loss + config.vf_coef * report.value_loss -
                config.ent_coef * report.entropy;
  return report;
}

// -- V-trace -----------------------------------------------------------------

template <class T>
void vtrace_targets(size_t steps, size_t envs, const T* log_rhos, const T* discounts,
                    const T* rewards, const T* values, const T* bootstrap,
                    const vtrace_config& config, T* vs, T* pg_advantages) {
  const T rho_bar = static_cast<T>(config.rho_bar);
  const T pg_rho_bar = static_cast<T>(config.pg_rho_bar);
  const T c_bar = static_cast<T>(config.c_bar);
  // The trust region's bounds on log(pi/mu); a row's sign of advantage picks
  // the bound it may not pass (the region is off when policy_clip is 0).
  const bool clip = config.policy_clip > 0;
  const T log_hi = clip ? static_cast<T>(std::log1p(config.policy_clip)) : T{0};
  const T log_lo = clip && config.policy_clip < 1
                     ? static_cast<T>(std::log1p(-config.policy_clip))
                     : -std::numeric_limits<T>::infinity();
  for (size_t e = 0; e < envs; ++e) {
    // Backward recursion; acc is v_{t+1} - V(x_{t+1}) (0 past the end).
    T acc = T{0};
    for (size_t t = steps; t-- > 0;) {
      const size_t i = t * envs + e;
      const T next_value = t + 1 < steps ? values[i + envs] : bootstrap[e];
      const T rho = std::exp(log_rhos[i]);
      const T delta =
        std::min(rho_bar, rho) * (rewards[i] + discounts[i] * next_value - values[i]);
      acc = delta + discounts[i] * std::min(c_bar, rho) * acc;
      vs[i] = values[i] + acc;
    }
    for (size_t t = 0; t < steps; ++t) {
      const size_t i = t * envs + e;
      const T next_vs = t + 1 < steps ? vs[i + envs] : bootstrap[e];
      const T rho = std::exp(log_rhos[i]);
      T adv =
        std::min(pg_rho_bar, rho) * (rewards[i] + discounts[i] * next_vs - values[i]);
      if (clip &&
          ((adv > 0 && log_rhos[i] > log_hi) || (adv < 0 && log_rhos[i] < log_lo)))
        adv = T{0};
      pg_advantages[i] = adv;
    }
  }
}

template <class T>
loss_report
vtrace_loss_and_grad(const model_spec& spec, const model_layout& layout, const T* params,
                     T* buffers, const vtrace_batch<T>& batch,
                     const vtrace_config& config, const train_options& options,
                     vtrace_targets_buffer<T>& targets, loss_workspace<T>& ws, T* grad) {
  const size_t n = batch.steps * batch.envs;
  const size_t rows = n + batch.envs;
  forward_all(spec, layout, params, buffers, batch.obs, rows, n, batch.discrete_actions,
              batch.box_actions, options, ws);
  const T* values = ws.critic.out.data();
  if (!targets.fixed) {
    targets.vs.resize(n);
    targets.pg_advantages.resize(n);
    std::vector<T> log_rhos(n);
    for (size_t i = 0; i < n; ++i)
      log_rhos[i] = ws.head.logp[i] - batch.behavior_logprob[i];
    vtrace_targets(batch.steps, batch.envs, log_rhos.data(), batch.discounts,
                   batch.rewards, values, values + n, config, targets.vs.data(),
                   targets.pg_advantages.data());
  }
  ws.d_logp.resize(n);
  ws.d_entropy.resize(n);
  ws.d_value.assign(rows, T{0}); // bootstrap values only feed the targets
  const T inv_n = T{1} / static_cast<T>(n);
  const T baseline = static_cast<T>(config.baseline_coef);
  double pg_sum = 0, v_sum = 0, ent_sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const T adv = targets.pg_advantages[i];
    pg_sum -= static_cast<double>(ws.head.logp[i] * adv);
    ws.d_logp[i] = -adv * inv_n;
    const T err = values[i] - targets.vs[i];
    v_sum += static_cast<double>(err * err);
    ws.d_value[i] = baseline * err * inv_n;
    ent_sum += static_cast<double>(ws.head.entropy[i]);
    ws.d_entropy[i] = -static_cast<T>(config.ent_coef) * inv_n;
  }
  loss_report report;
  const double count = static_cast<double>(n);
  report.policy_loss = pg_sum / count;
  report.value_loss = 0.5 * v_sum / count;
  report.entropy = ent_sum / count;
  report.loss = report.policy_loss + config.baseline_coef * report.value_loss -
                config.ent_coef * report.entropy;
  backward_all(spec, layout, params, rows, n, batch.discrete_actions, ws, grad);
  return report;
}

#define TROUPE_INSTANTIATE_LOSSES(T)                                                     \
  template void normalize_advantages<T>(const T*, size_t, T*);                           \
  template loss_report ppo_loss_and_grad<T>(                                             \
    const model_spec&, const model_layout&, const T*, T*, const ppo_batch<T>&,           \
    const ppo_config&, const train_options&, loss_workspace<T>&, T*, ppo_part);          \
  template void vtrace_targets<T>(size_t, size_t, const T*, const T*, const T*,          \
                                  const T*, const T*, const vtrace_config&, T*, T*);     \
  template loss_report vtrace_loss_and_grad<T>(                                          \
    const model_spec&, const model_layout&, const T*, T*, const vtrace_batch<T>&,        \
    const vtrace_config&, const train_options&, vtrace_targets_buffer<T>&,               \
    loss_workspace<T>&, T*);

TROUPE_INSTANTIATE_LOSSES(float)
TROUPE_INSTANTIATE_LOSSES(double)

} // namespace troupe::learners
