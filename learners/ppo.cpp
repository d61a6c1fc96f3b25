#include "learners/ppo.hpp"

#include <algorithm>
#include <utility>

#include "learners/mlp.hpp"
#include "learners/rollout.hpp"

namespace troupe::learners {

// -- shared with A3C ---------------------------------------------------------

size_t count_valid_rows(const rollout_view& batch) {
  size_t valid = 0;
  for (size_t k = 0; k < batch.rows(); ++k)
    valid += batch.autoreset[k] == 0;
  return valid;
}

void advantage_rows::compute(const rollout_view& b, const behavior_outputs& acting,
                             const float* old_logp, double gamma, double lambda) {
  const size_t rows = b.rows();
  acting_ = &acting;
  old_logp_ = old_logp;
  adv_.resize(rows);
  ret_.resize(rows);
  valid_.resize(rows);
  compute_gae(b.steps, b.envs, b.rewards, b.terminated, b.truncated, b.autoreset,
              acting.values.data(), gamma, lambda, adv_.data(), ret_.data(),
              valid_.data());
  index_.clear();
  for (size_t k = 0; k < rows; ++k)
    if (valid_[k])
      index_.push_back(k);
}

ppo_batch<float> advantage_rows::gather(const rollout_view& b, bool discrete, size_t lo,
                                        size_t hi) {
  const size_t mb = hi - lo, od = b.obs_dim, ad = b.action_dim;
  obs_.resize(mb * od);
  logp_.resize(mb);
  mb_adv_.resize(mb);
  mb_ret_.resize(mb);
  val_.resize(mb);
  act_.resize(mb);
  box_.resize(mb * ad);
  for (size_t r = 0; r < mb; ++r) {
    const size_t k = index_[lo + r];
    std::copy(b.observations + k * od, b.observations + (k + 1) * od, &obs_[r * od]);
    logp_[r] = old_logp_[k];
    mb_adv_[r] = adv_[k];
    mb_ret_[r] = ret_[k];
    val_[r] = acting_->values[k];
    if (discrete)
      act_[r] = acting_->actions_i64[k];
    else
      std::copy(b.actions + k * ad, b.actions + (k + 1) * ad, &box_[r * ad]);
  }
  ppo_batch<float> batch;
  batch.rows = mb;
  batch.obs = obs_.data();
  batch.discrete_actions = discrete ? act_.data() : nullptr;
  batch.box_actions = discrete ? nullptr : box_.data();
  batch.old_logprob = logp_.data();
  batch.advantages = mb_adv_.data();
  batch.returns = mb_ret_.data();
  batch.old_values = val_.data();
  return batch;
}

// -- PPO ---------------------------------------------------------------------

namespace {

class ppo final : public algorithm {
public:
  ppo(const model_spec& spec, double gamma, ppo_settings settings)
    : discrete_(spec.action == action_kind::discrete), gamma_(gamma),
      s_(std::move(settings)),
      same_pass_(s_.local_bn_same_pass && spec.batch_norm == batch_norm_mode::local),
      no_batch_norm_(spec.batch_norm == batch_norm_mode::none) {}

  const char* name() const noexcept override { return "ppo"; }

  // The ratio is taken against the policy that acted.
  bool uses_acting_weights() const noexcept override { return true; }

  status check_batch_size(size_t rows) const override {
    if (rows < s_.num_minibatches)
      return make_error(errc::bad_config,
                        "ppo: a batch of {} transitions (num_steps x num_envs) cannot "
                        "be split into num_minibatches = {} minibatches; it is required "
                        "that num_minibatches <= num_steps x num_envs",
                        rows, s_.num_minibatches);
    return ok_status();
  }

  status check_batch(const rollout_view& b) const override {
    const size_t valid = count_valid_rows(b);
    if (valid < s_.num_minibatches)
      return make_error(errc::bad_input,
                        "ppo: the batch has {} transitions ({} steps x {} environments, "
                        "{} reset steps), fewer than num_minibatches = {}",
                        valid, b.steps, b.envs, b.rows() - valid, s_.num_minibatches);
    if (b.behavior_recorded && b.behavior_logp_count != b.rows())
      return make_error(errc::bad_input,
                        "ppo: a batch acted with several policy versions has {} "
                        "behavior log-probabilities for {} rows ({} steps x {} "
                        "environments); it needs one per row",
                        b.behavior_logp_count, b.rows(), b.steps, b.envs);
    return ok_status();
  }

  result<update_metrics> update(const rollout_view& b, const actor_critic& acting,
                                update_host& host) override {
    // 1. The acting policy's values (for GAE and the value clip) and
    //    log-probabilities (the ratio's denominator). Rows acted with several
    //    versions (a game-driven batch) take theirs as recorded when acting,
    //    so that the ratio corrects for the lag each row saw.
    if (auto ok = acting_.compute(acting, b); !ok)
      return ok.err();
    const float* old_logp = b.behavior_recorded ? b.behavior_logp : acting_.logp.data();

    // 2. Advantages and returns (GAE) over the valid rows.
    rows_.compute(b, acting_, old_logp, gamma_, s_.gae_lambda);
    auto& index = rows_.index();

    // 3. update_epochs passes, each in num_minibatches shuffled minibatches:
    //    one gradient per minibatch, each sent before the next is computed on
    //    the weights the parameter server answers with.
    const size_t mbs = s_.num_minibatches;
    metrics_sum sum;
    if (auto local = host.local_steps();
        local && no_batch_norm_ && host.backend().fuses_updates())
      return fused_update(b, *local, host);
    for (size_t epoch = 0; epoch < s_.update_epochs; ++epoch) {
      for (size_t i = index.size(); i > 1; --i)
        std::swap(index[i - 1], index[host.generator().next() % i]);
      for (size_t m = 0; m < mbs; ++m) {
        const size_t lo = index.size() * m / mbs, hi = index.size() * (m + 1) / mbs;
        auto batch = rows_.gather(b, discrete_, lo, hi);
        if (same_pass_ && !b.behavior_recorded)
          if (auto ok = same_pass_old(acting, batch); !ok)
            return ok.err();
        if (auto ok = host.load_weights(); !ok)
          return ok.err();
        auto rep = host.backend().ppo_gradient(batch, s_.loss);
        if (!rep)
          return rep.err();
        sum.add(*rep);
        const bool last = epoch + 1 == s_.update_epochs && m + 1 == mbs;
        if (auto ok = host.push_gradient(hi - lo, last); !ok)
          return ok.err();
      }
    }
    return sum.finish();
  }

private:
  // Step 3 as one call into the backend (a lone learner stepping locally on
  // a backend that runs whole updates, the CUDA one): the valid rows go up
  // once, with the order each epoch's shuffle gives them, drawn from the
  // generator exactly as the minibatch loop draws it, so that both paths
  // see the same minibatches.
  result<update_metrics> fused_update(const rollout_view& b,
                                      const local_step_settings& local,
                                      update_host& host) {
    auto& index = rows_.index();
    const size_t valid = index.size();
    position_.assign(b.rows(), 0);
    for (size_t i = 0; i < valid; ++i)
      position_[index[i]] = static_cast<uint32_t>(i);
    ppo_update_request request;
    request.batch = rows_.gather(b, discrete_, 0, valid);
    request.epochs = s_.update_epochs;
    request.minibatches = s_.num_minibatches;
    request.lr = local.lr;
    request.max_grad_norm = local.max_grad_norm;
    order_.resize(request.epochs * valid);
    for (size_t epoch = 0; epoch < s_.update_epochs; ++epoch) {
      for (size_t i = valid; i > 1; --i)
        std::swap(index[i - 1], index[host.generator().next() % i]);
      for (size_t i = 0; i < valid; ++i)
        order_[epoch * valid + i] = position_[index[i]];
    }
    request.order = order_.data();
    if (auto ok = host.load_weights(); !ok)
      return ok.err();
    auto report = host.backend().ppo_update(request, s_.loss);
    if (!report)
      return report.err();
    metrics_sum sum;
    for (const auto& loss : report->losses)
      sum.add(loss);
    if (auto ok = host.finish_local_update(report->taken, report->rejected); !ok)
      return ok.err();
    return sum.finish();
  }

  // Local batch norm: the learning pass normalizes each minibatch with its
  // own statistics, while the acting pass used running ones, so that the
  // ratio would compare two differently normalized networks (its value is
  // not 1 even for unchanged weights). The acting weights' log-probabilities
  // and values are taken again over the minibatch, normalized as the
  // learning pass normalizes it.
  status same_pass_old(const actor_critic& acting, ppo_batch<float>& batch) {
    if (auto ok = minibatch_.compute_rows(acting, batch.obs, batch.rows,
                                          batch.discrete_actions, batch.box_actions,
                                          /*batch_statistics=*/true);
        !ok)
      return ok;
    batch.old_logprob = minibatch_.logp.data();
    batch.old_values = minibatch_.values.data();
    return ok_status();
  }

  bool discrete_;
  double gamma_;
  ppo_settings s_;
  bool same_pass_;                         // local batch norm with local_bn_same_pass
  bool no_batch_norm_;                     // whole updates can run in the backend
  std::vector<uint32_t> position_, order_; // fused_update's row positions and order
  behavior_outputs minibatch_;             // same_pass_old's, over one minibatch
  behavior_outputs acting_;
  advantage_rows rows_;
};

std::unique_ptr<algorithm> make_ppo(const model_spec& spec, double gamma,
                                    const ppo_settings& s) {
  return std::make_unique<ppo>(spec, gamma, s);
}

} // namespace

algorithm_info ppo_info() {
  using S = ppo_settings;
  return declare_algorithm<S>(
    "ppo",
    "clipped surrogate with GAE advantages, several epochs of minibatches per batch "
    "(CleanRL's ppo.py)",
    {
      {"gae_lambda", +[](S& s) -> double& { return s.gae_lambda; }, 0.0, 1.0, false,
       false, "GAE lambda (CleanRL 0.95)"},
      {"num_minibatches", +[](S& s) -> size_t& { return s.num_minibatches; }, 1, 65536,
       false, false, "minibatches per epoch (CleanRL 4); at most num_steps x num_envs"},
      {"update_epochs", +[](S& s) -> size_t& { return s.update_epochs; }, 1, 1000, false,
       false, "epochs per batch (CleanRL 4)"},
      {"norm_adv", +[](S& s) -> bool& { return s.loss.normalize_advantages; }, 0, 1,
       false, false, "normalize advantages per minibatch (CleanRL)"},
      {"clip_coef", +[](S& s) -> double& { return s.loss.clip_coef; }, 0.0, 10.0, false,
       false, "surrogate and value clipping coefficient (CleanRL 0.2)"},
      {"clip_vloss", +[](S& s) -> bool& { return s.loss.clip_value_loss; }, 0, 1, false,
       false, "clip the value loss (CleanRL)"},
      {"ent_coef", +[](S& s) -> double& { return s.loss.ent_coef; }, 0.0, 10.0, false,
       false, "entropy bonus weight (CleanRL 0.01)"},
      {"vf_coef", +[](S& s) -> double& { return s.loss.vf_coef; }, 0.0, 100.0, false,
       false, "value loss weight (CleanRL 0.5)"},
      {"local_bn_same_pass", +[](S& s) -> bool& { return s.local_bn_same_pass; }, 0, 1,
       false, false,
       "model.batch_norm = local: the ratio's old log-probabilities and the value "
       "clip's old values are taken over each minibatch with its own statistics, as "
       "the learning pass normalizes (0: from the acting pass's running statistics)"},
    },
    make_ppo);
}

} // namespace troupe::learners
