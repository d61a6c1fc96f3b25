#include "learners/impala.hpp"

#include <vector>

#include "learners/rollout.hpp"

namespace troupe::learners {

namespace {

class impala final : public algorithm {
public:
  impala(const model_spec& spec, double gamma, impala_settings settings)
    : discrete_(spec.action == action_kind::discrete), gamma_(gamma), s_(settings),
      same_pass_(s_.local_bn_same_pass && spec.batch_norm == batch_norm_mode::local) {}

  const char* name() const noexcept override { return "impala"; }

  // mu is the policy that acted.
  bool uses_acting_weights() const noexcept override { return true; }

  status check_batch_size(size_t) const override { return ok_status(); }

  status check_batch(const rollout_view& b) const override {
    if (b.steps == 0 || b.envs == 0)
      return make_error(errc::bad_input,
                        "impala: V-trace needs at least one step of one environment, "
                        "got {} steps x {} environments",
                        b.steps, b.envs);
    const bool none = b.behavior_logp_count == 0 && !b.behavior_recorded;
    if (!none && b.behavior_logp_count != b.rows())
      return make_error(errc::bad_input,
                        "impala: V-trace needs the behavior log-probability of every "
                        "step; the batch has {} for {} steps ({} steps x {} "
                        "environments){}",
                        b.behavior_logp_count, b.rows(), b.steps, b.envs,
                        b.behavior_recorded ? " and was acted with several policy "
                                              "versions, so they cannot be recomputed"
                                            : "");
    return ok_status();
  }

  result<update_metrics> update(const rollout_view& b, const actor_critic& acting,
                                update_host& host) override {
    const size_t rows = b.rows();
    // 1. mu's log-probabilities: as recorded when acting (no forward pass),
    //    or, for a batch without them, recomputed from the acting weights.
    //    Local batch norm: the learning pass normalizes the whole batch with
    //    its own statistics, while the acting pass used running ones, so that
    //    pi/mu would compare two differently normalized networks (not 1 even
    //    for unchanged weights); mu is taken again over the same rows with
    //    the acting weights, normalized as the learning pass normalizes them,
    //    where those weights are the batch's own version.
    const bool recorded = b.behavior_logp_count == rows;
    const bool same_pass =
      same_pass_ && !b.behavior_recorded && (!recorded || b.acting_version_kept);
    const float* mu_logp = nullptr;
    if (recorded && !same_pass) {
      mu_logp = b.behavior_logp;
      if (discrete_)
        discrete_action_indices(b, acting_.actions_i64);
    } else {
      if (auto ok = acting_.compute(acting, b, /*batch_statistics=*/same_pass); !ok)
        return ok.err();
      mu_logp = acting_.logp.data();
    }
    // 2. Discounts (0 past a termination or a reset step) and mu's
    //    log-probabilities with reset steps masked out (rho = c = 0 there).
    discounts_.resize(rows);
    masked_logp_.resize(rows);
    vtrace_inputs(rows, b.terminated, b.autoreset, mu_logp, gamma_, discounts_.data(),
                  masked_logp_.data());
    // 3. One gradient of the V-trace loss over the whole batch; the targets
    //    come from this forward pass and are held constant.
    vtrace_batch<float> batch;
    batch.steps = b.steps;
    batch.envs = b.envs;
    batch.obs = b.observations;
    batch.discrete_actions = discrete_ ? acting_.actions_i64.data() : nullptr;
    batch.box_actions = discrete_ ? nullptr : b.actions;
    batch.behavior_logprob = masked_logp_.data();
    batch.rewards = b.rewards;
    batch.discounts = discounts_.data();
    if (auto ok = host.load_weights(); !ok)
      return ok.err();
    auto rep = host.backend().vtrace_gradient(batch, s_.loss);
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
  impala_settings s_;
  bool same_pass_; // local batch norm with local_bn_same_pass
  behavior_outputs acting_;
  std::vector<float> discounts_, masked_logp_;
};

std::unique_ptr<algorithm> make_impala(const model_spec& spec, double gamma,
                                       const impala_settings& s) {
  return std::make_unique<impala>(spec, gamma, s);
}

} // namespace

algorithm_info impala_info() {
  using S = impala_settings;
  return declare_algorithm<S>(
    "impala",
    "V-trace off-policy actor-critic, one gradient per batch (Espeholt et al. 2018)",
    {
      {"rho_bar", +[](S& s) -> double& { return s.loss.rho_bar; }, 0.0, 1e9, false, false,
       "importance weight clip of the V-trace targets (IMPALA paper 1)"},
      {"c_bar", +[](S& s) -> double& { return s.loss.c_bar; }, 0.0, 1e9, false, false,
       "trace-cutting clip (IMPALA paper 1)"},
      {"pg_rho_bar", +[](S& s) -> double& { return s.loss.pg_rho_bar; }, 0.0, 1e9, false,
       false,
       "importance weight clip of the policy-gradient advantages (IMPALA paper 1)"},
      {"ent_coef", +[](S& s) -> double& { return s.loss.ent_coef; }, 0.0, 10.0, false,
       false, "entropy bonus weight (IMPALA paper 0.01)"},
      {"vf_coef", +[](S& s) -> double& { return s.loss.baseline_coef; }, 0.0, 100.0,
       false, false, "value loss weight (IMPALA baseline cost 0.5)"},
      {"policy_clip", +[](S& s) -> double& { return s.loss.policy_clip; }, 0.0, 1.0,
       false, true,
       "trust region of the policy gradient: a row whose ratio pi/mu left "
       "[1 - clip, 1 + clip] in its advantage's direction adds no policy gradient, "
       "as in PPO's clipped surrogate (APPO); 0: none, V-trace as published. "
       "Keeps 8 and 16 learners of one process from collapsing (docs/training.md)"},
      {"local_bn_same_pass", +[](S& s) -> bool& { return s.local_bn_same_pass; }, 0, 1,
       false, false,
       "model.batch_norm = local: mu's log-probabilities are taken over the whole "
       "batch with the acting weights and its own statistics, as the learning pass "
       "normalizes (0: as recorded when acting, with running statistics)"},
    },
    make_impala);
}

} // namespace troupe::learners
