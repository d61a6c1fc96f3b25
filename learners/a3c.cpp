#include "learners/a3c.hpp"

#include <utility>

#include "learners/ppo.hpp"

namespace troupe::learners {

namespace {

class a3c final : public algorithm {
public:
  a3c(const model_spec& spec, double gamma, a3c_settings settings)
    : discrete_(spec.action == action_kind::discrete), gamma_(gamma), s_(settings) {
    loss_.vf_coef = s_.vf_coef;
    loss_.ent_coef = s_.ent_coef;
    loss_.clip_value_loss = false;
    loss_.normalize_advantages = false;
  }

  const char* name() const noexcept override { return "a3c"; }

  // On-policy on the current weights: the batch's acting version is not used.
  bool uses_acting_weights() const noexcept override { return false; }

  status check_batch_size(size_t) const override { return ok_status(); }

  status check_batch(const rollout_view& b) const override {
    if (count_valid_rows(b) == 0)
      return make_error(errc::bad_input,
                        "a3c: the batch ({} steps x {} environments) has no transition, "
                        "only reset steps",
                        b.steps, b.envs);
    return ok_status();
  }

  result<update_metrics> update(const rollout_view& b, const actor_critic& current,
                                update_host& host) override {
    // 1. Values and log-probabilities of the current weights: the ratio is 1.
    if (auto ok = acting_.compute(current, b); !ok)
      return ok.err();
    // 2. n-step advantages and returns over the valid rows.
    rows_.compute(b, acting_, acting_.logp.data(), gamma_, s_.gae_lambda);
    // 3. One gradient over the whole batch.
    const size_t rows = rows_.index().size();
    const auto batch = rows_.gather(b, discrete_, 0, rows);
    if (auto ok = host.load_weights(); !ok)
      return ok.err();
    auto rep = host.backend().ppo_gradient(batch, loss_);
    if (!rep)
      return rep.err();
    metrics_sum sum;
    sum.add(*rep);
    if (auto ok = host.push_gradient(rows, true); !ok)
      return ok.err();
    return sum.finish();
  }

private:
  bool discrete_;
  double gamma_;
  a3c_settings s_;
  ppo_config loss_;
  behavior_outputs acting_;
  advantage_rows rows_;
};

std::unique_ptr<algorithm> make_a3c(const model_spec& spec, double gamma,
                                    const hyperparameter_values& v) {
  a3c_settings s;
  s.gae_lambda = v.at("gae_lambda");
  s.vf_coef = v.at("vf_coef");
  s.ent_coef = v.at("ent_coef");
  return std::make_unique<a3c>(spec, gamma, s);
}

} // namespace

algorithm_info a3c_info() {
  using t = hyperparameter_type;
  algorithm_info info;
  info.name = "a3c";
  info.summary = "n-step advantage actor-critic, one gradient per fresh batch of the "
                 "current weights (Mnih et al. 2016)";
  info.hyperparameters = {
    {"gae_lambda", t::floating, 0.95, 0.0, 1.0, false, false,
     "GAE lambda of the advantages (1: the paper's n-step returns)"},
    {"ent_coef", t::floating, 0.01, 0.0, 10.0, false, false,
     "entropy bonus weight (the paper 0.01)"},
    {"vf_coef", t::floating, 0.5, 0.0, 100.0, false, false, "value loss weight"},
  };
  info.make = make_a3c;
  return info;
}

} // namespace troupe::learners
