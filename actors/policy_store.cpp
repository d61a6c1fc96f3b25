#include "actors/policy_store.hpp"

#include <algorithm>
#include <cmath>

#include "base/rng.hpp"
#include "learners/mlp.hpp"
#include "learners/rollout.hpp"

namespace troupe::actors {

policy_store::policy_store(const learners::actor_critic& initial, size_t history)
  : history_(std::max<size_t>(history, 1)) {
  versions_.push_back(std::make_shared<policy_snapshot>(policy_snapshot{0, initial}));
}

void policy_store::publish(uint64_t version, const float* params, const float* buffers) {
  // Copy the newest model (cheap vectors), outside the lock.
  auto base = latest();
  auto next = std::make_shared<policy_snapshot>(policy_snapshot{version, base->model});
  std::copy(params, params + next->model.param_count(), next->model.params());
  if (buffers)
    std::copy(buffers, buffers + next->model.buffer_count(), next->model.buffers());
  std::shared_ptr<const policy_snapshot> published = next;
  base::mutex_lock listening(listeners_mtx_);
  {
    base::mutex_lock guard(mtx_);
    if (!versions_.empty() && versions_.back()->version >= version && version != 0)
      return;
    versions_.push_back(std::move(next));
    while (versions_.size() > history_)
      versions_.pop_front();
  }
  listeners_.erase(std::remove_if(listeners_.begin(), listeners_.end(),
                                  [&](const listener& l) { return !l(published); }),
                   listeners_.end());
}

void policy_store::subscribe(listener l) {
  base::mutex_lock listening(listeners_mtx_);
  if (l(latest()))
    listeners_.push_back(std::move(l));
}

std::shared_ptr<const policy_snapshot> policy_store::latest() const {
  base::mutex_lock guard(mtx_);
  return versions_.back();
}

std::shared_ptr<const policy_snapshot> policy_store::at(uint64_t version) const {
  base::mutex_lock guard(mtx_);
  for (auto i = versions_.rbegin(); i != versions_.rend(); ++i)
    if ((*i)->version == version)
      return *i;
  return nullptr;
}

namespace {

struct store_policy_state {
  std::shared_ptr<policy_store> store;
  std::shared_ptr<const policy_snapshot> current;
  size_t steps_per_batch = 1;
  uint64_t calls = 0;
  bool deterministic = false;
  learners::policy_output out;
  learners::network_cache<float> actor; // reused: acting allocates nothing per step
};

// The actor's outputs for `rows` observations: logits (discrete) or means
// (box). Acting needs no value, so the critic is not evaluated.
result<const float*> actor_outputs(store_policy_state& st,
                                   const learners::actor_critic& model, const float* obs,
                                   size_t rows) {
  if (model.spec().obs_norm) {
    // The store's models take observations as the runner hands them over;
    // evaluate() reports a model that wants to normalize them itself.
    if (auto ok = model.evaluate(obs, rows, nullptr, st.out); !ok)
      return make_error(ok.err().code, "policy version {}: {}", st.current->version,
                        ok.err().message);
    return model.spec().action == learners::action_kind::discrete ? st.out.logits.data()
                                                                  : st.out.mean.data();
  }
  learners::network_forward(model.layout().actor, model.spec(), model.params(),
                            model.buffers(), obs, rows, learners::forward_mode::eval,
                            st.actor);
  return st.actor.out.data();
}

} // namespace

policy_fn make_store_policy(std::shared_ptr<policy_store> store, size_t steps_per_batch,
                            bool deterministic) {
  auto st = std::make_shared<store_policy_state>();
  st->store = std::move(store);
  st->steps_per_batch = std::max<size_t>(steps_per_batch, 1);
  st->deterministic = deterministic;
  return [st](const float* obs, size_t num_envs, base::rng& gen, float* actions,
              float* logp) -> result<uint64_t> {
    ++st->calls;
    if (!st->current || (st->calls - 1) % st->steps_per_batch == 0)
      st->current = st->store->latest();
    const auto& model = st->current->model;
    auto outputs = actor_outputs(*st, model, obs, num_envs);
    if (!outputs)
      return outputs.err();
    const float* head = *outputs;
    const auto& spec = model.spec();
    if (spec.action == learners::action_kind::discrete) {
      const size_t n = static_cast<size_t>(spec.n);
      if (st->deterministic) {
        for (size_t r = 0; r < num_envs; ++r) {
          const float* l = &head[r * n];
          const size_t pick = static_cast<size_t>(std::max_element(l, l + n) - l);
          actions[r] = static_cast<float>(pick);
          if (logp) {
            double total = 0;
            for (size_t j = 0; j < n; ++j)
              total += std::exp(static_cast<double>(l[j]) - l[pick]);
            logp[r] = static_cast<float>(-std::log(total));
          }
        }
      } else {
        learners::sample_categorical(head, num_envs, n, gen, actions, logp);
      }
    } else {
      const size_t d = static_cast<size_t>(spec.act_dim);
      const float* log_std = model.params() + model.layout().log_std;
      if (st->deterministic) {
        std::copy(head, head + num_envs * d, actions);
        if (logp) {
          constexpr double half_log_two_pi = 0.91893853320467274;
          double lp = 0;
          for (size_t j = 0; j < d; ++j)
            lp -= log_std[j] + half_log_two_pi;
          std::fill(logp, logp + num_envs, static_cast<float>(lp));
        }
      } else {
        learners::sample_gaussian(head, log_std, num_envs, d, gen, actions, logp);
      }
    }
    return st->current->version;
  };
}

divergence_fn make_store_divergence(std::shared_ptr<policy_store> store) {
  auto st = std::make_shared<store_policy_state>();
  st->store = std::move(store);
  auto second = std::make_shared<store_policy_state>();
  return [st, second](const float* a, const float* b, size_t rows) -> result<double> {
    if (rows == 0)
      return 0.0;
    st->current = st->store->latest();
    second->current = st->current; // one set of weights for both views
    const auto& model = st->current->model;
    const auto& spec = model.spec();
    auto head_a = actor_outputs(*st, model, a, rows);
    if (!head_a)
      return head_a.err();
    auto head_b = actor_outputs(*second, model, b, rows);
    if (!head_b)
      return head_b.err();
    const float* pa = *head_a;
    const float* pb = *head_b;
    double total = 0;
    if (spec.action == learners::action_kind::discrete) {
      const size_t n = static_cast<size_t>(spec.n);
      std::vector<double> la(n), lb(n);
      auto log_softmax = [n](const float* l, std::vector<double>& out) {
        const double top = *std::max_element(l, l + n);
        double sum = 0;
        for (size_t j = 0; j < n; ++j)
          sum += std::exp(static_cast<double>(l[j]) - top);
        const double log_sum = top + std::log(sum);
        for (size_t j = 0; j < n; ++j)
          out[j] = static_cast<double>(l[j]) - log_sum;
      };
      for (size_t r = 0; r < rows; ++r) {
        log_softmax(&pa[r * n], la);
        log_softmax(&pb[r * n], lb);
        for (size_t j = 0; j < n; ++j)
          total += std::exp(la[j]) * (la[j] - lb[j]);
      }
    } else {
      // Equal standard deviations: KL = sum_j (mu_a - mu_b)^2 / (2 sigma_j^2).
      const size_t d = static_cast<size_t>(spec.act_dim);
      const float* log_std = model.params() + model.layout().log_std;
      for (size_t r = 0; r < rows; ++r)
        for (size_t j = 0; j < d; ++j) {
          const double gap = static_cast<double>(pa[r * d + j]) - pb[r * d + j];
          total += gap * gap * 0.5 * std::exp(-2.0 * static_cast<double>(log_std[j]));
        }
    }
    return total / static_cast<double>(rows);
  };
}

} // namespace troupe::actors
