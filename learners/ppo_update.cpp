// A whole PPO update handed to a backend (learners/backend.hpp): the request's
// checks, and the minibatch-by-minibatch form the CPU backend runs.
#include <cmath>

#include "learners/backend.hpp"

namespace troupe::learners {

result<ppo_update_report> learner_backend::ppo_update(const ppo_update_request&,
                                                      const ppo_config&) {
  return make_error(errc::unavailable,
                    "this backend takes PPO updates one minibatch at a time");
}

status validate_ppo_update(const model_spec& spec, const ppo_update_request& request) {
  const size_t rows = request.batch.rows;
  if (spec.batch_norm != batch_norm_mode::none)
    return make_error(errc::invalid_argument,
                      "a whole PPO update cannot run a model with batch norm (its "
                      "statistics move between minibatches); take it one minibatch at a "
                      "time");
  if (rows == 0)
    return make_error(errc::invalid_argument, "a PPO update needs at least one row");
  if (rows > UINT32_MAX)
    return make_error(errc::invalid_argument,
                      "a PPO update takes at most {} rows, got {}", UINT32_MAX, rows);
  if (request.epochs == 0)
    return make_error(errc::invalid_argument, "a PPO update needs epochs >= 1, got 0");
  if (request.minibatches == 0 || request.minibatches > rows)
    return make_error(errc::invalid_argument,
                      "a PPO update of {} rows needs 1 <= minibatches <= {}, got {}",
                      rows, rows, request.minibatches);
  if (!request.order)
    return make_error(errc::invalid_argument, "a PPO update needs its row order");
  const size_t n = request.epochs * rows;
  for (size_t i = 0; i < n; ++i)
    if (request.order[i] >= rows)
      return make_error(errc::invalid_argument,
                        "entry {} (epoch {}) of a PPO update's row order must be below "
                        "{}, got {}",
                        i, i / rows, rows, request.order[i]);
  if (!std::isfinite(request.lr) || request.lr < 0)
    return make_error(errc::invalid_argument,
                      "a PPO update's learning rate must be finite and >= 0, got {}",
                      request.lr);
  return validate_actions(spec, request.batch.discrete_actions, request.batch.box_actions,
                          rows);
}

result<ppo_update_report> ppo_update_stepwise(learner_backend& backend,
                                              const model_spec& spec,
                                              const ppo_update_request& request,
                                              const ppo_config& config) {
  if (auto ok = validate_ppo_update(spec, request); !ok)
    return ok.err();
  const auto& b = request.batch;
  const size_t rows = b.rows, od = static_cast<size_t>(spec.obs_dim);
  const size_t ad = static_cast<size_t>(spec.head_dim());
  const bool box = spec.action == action_kind::box;
  std::vector<float> obs, act_box, logp, adv, ret, val;
  std::vector<int64_t> act;
  ppo_update_report report;
  for (size_t e = 0; e < request.epochs; ++e) {
    const uint32_t* order = request.order + e * rows;
    for (size_t m = 0; m < request.minibatches; ++m) {
      const size_t lo = rows * m / request.minibatches;
      const size_t hi = rows * (m + 1) / request.minibatches;
      const size_t mb = hi - lo;
      obs.resize(mb * od);
      logp.resize(mb);
      adv.resize(mb);
      ret.resize(mb);
      val.resize(mb);
      act.resize(box ? 0 : mb);
      act_box.resize(box ? mb * ad : 0);
      for (size_t r = 0; r < mb; ++r) {
        const size_t k = order[lo + r];
        std::copy(b.obs + k * od, b.obs + (k + 1) * od, &obs[r * od]);
        logp[r] = b.old_logprob[k];
        adv[r] = b.advantages[k];
        ret[r] = b.returns[k];
        val[r] = b.old_values[k];
        if (box)
          std::copy(b.box_actions + k * ad, b.box_actions + (k + 1) * ad,
                    &act_box[r * ad]);
        else
          act[r] = b.discrete_actions[k];
      }
      ppo_batch<float> batch{mb,
                             obs.data(),
                             box ? nullptr : act.data(),
                             box ? act_box.data() : nullptr,
                             logp.data(),
                             adv.data(),
                             ret.data(),
                             val.data()};
      auto loss = backend.ppo_gradient(batch, config);
      if (!loss)
        return loss.err();
      report.losses.push_back(*loss);
      auto norm = backend.apply_gradient(request.lr, request.max_grad_norm);
      if (!norm)
        return norm.err();
      report.norms.push_back(*norm);
      if (std::isfinite(*norm))
        ++report.taken;
      else
        ++report.rejected;
    }
  }
  return report;
}

} // namespace troupe::learners
