#include "learners/a3c.hpp"

#include <utility>

#include "learners/ppo.hpp"

namespace troupe::learners {

namespace {

class a3c final : public algorithm {
public:
  a3c(const model_spec& spec, double gamma, a3c_settings settings)
    : discrete_(spec.action == action_kind::discrete), gamma_(gamma), s_(settings),
      same_pass_(s_.local_bn_same_pass && spec.batch_norm == batch_norm_mode::local) {
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
    // 1. Values and log-probabilities of the current weights: the ratio is 1
    //    (with local batch norm, once taken again as in 3.).
    if (auto ok = acting_.compute(current, b); !ok)
      return ok.err();
    // 2. n-step advantages and returns over the valid rows.
    rows_.compute(b, acting_, acting_.logp.data(), gamma_, s_.gae_lambda);
    // 3. One gradient over the whole batch. Local batch norm: the learning
    //    pass normalizes these rows with their own statistics, while the pass
    //    above used running ones, so that the ratio would not be 1 (and the
    //    surrogate's clip would drop rows); the old log-probabilities are
    //    taken again over the same rows, normalized alike.
    const size_t rows = rows_.index().size();
    auto batch = rows_.gather(b, discrete_, 0, rows);
    if (same_pass_) {
      if (auto ok = learning_rows_.compute_rows(current, batch.obs, rows,
                                                batch.discrete_actions, batch.box_actions,
                                                /*batch_statistics=*/true);
          !ok)
        return ok.err();
      batch.old_logprob = learning_rows_.logp.data();
    }
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
  bool same_pass_; // local batch norm with local_bn_same_pass
  ppo_config loss_;
  behavior_outputs acting_;
  behavior_outputs learning_rows_; // the valid rows normalized alike (same_pass_)
  advantage_rows rows_;
};

std::unique_ptr<algorithm> make_a3c(const model_spec& spec, double gamma,
                                    const a3c_settings& s) {
  return std::make_unique<a3c>(spec, gamma, s);
}

} // namespace

algorithm_info a3c_info() {
  using S = a3c_settings;
  return declare_algorithm<S>(
    "a3c",
    "n-step advantage actor-critic, one gradient per fresh batch of the current weights "
    "(Mnih et al. 2016)",
    {
      {"gae_lambda", +[](S& s) -> double& { return s.gae_lambda; }, 0.0, 1.0, false,
       false, "GAE lambda of the advantages (1: the paper's n-step returns)"},
      {"ent_coef", +[](S& s) -> double& { return s.ent_coef; }, 0.0, 10.0, false, false,
       "entropy bonus weight (the paper 0.01)"},
      {"vf_coef", +[](S& s) -> double& { return s.vf_coef; }, 0.0, 100.0, false, false,
       "value loss weight"},
      {"local_bn_same_pass", +[](S& s) -> bool& { return s.local_bn_same_pass; }, 0, 1,
       false, false,
       "model.batch_norm = local: the ratio's old log-probabilities are taken over the "
       "batch's valid rows with their own statistics, as the learning pass normalizes "
       "(0: with running statistics, so that the ratio is not 1)"},
    },
    make_a3c);
}

} // namespace troupe::learners
