#include "actors/policy_store.hpp"

#include <algorithm>
#include <stdexcept>

#include "kernels/rng.hpp"
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
  std::lock_guard<std::mutex> guard(mtx_);
  if (!versions_.empty() && versions_.back()->version >= version && version != 0)
    return;
  versions_.push_back(std::move(next));
  while (versions_.size() > history_)
    versions_.pop_front();
}

std::shared_ptr<const policy_snapshot> policy_store::latest() const {
  std::lock_guard<std::mutex> guard(mtx_);
  return versions_.back();
}

std::shared_ptr<const policy_snapshot> policy_store::at(uint64_t version) const {
  std::lock_guard<std::mutex> guard(mtx_);
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
  uint64_t fail_after = 0;
  bool deterministic = false;
  kernels::rng gen;
  learners::policy_output out;
};

} // namespace

policy_fn make_store_policy(std::shared_ptr<policy_store> store, size_t steps_per_batch,
                            uint64_t seed, bool deterministic,
                            uint64_t fail_after_calls) {
  auto st = std::make_shared<store_policy_state>();
  st->store = std::move(store);
  st->steps_per_batch = std::max<size_t>(steps_per_batch, 1);
  st->fail_after = fail_after_calls;
  st->deterministic = deterministic;
  st->gen.seed_with(seed);
  return [st](const float* obs, size_t num_envs, float* actions) -> uint64_t {
    ++st->calls;
    if (st->fail_after != 0 && st->calls == st->fail_after)
      throw std::runtime_error("policy failure injected for a supervision test");
    if (!st->current || (st->calls - 1) % st->steps_per_batch == 0)
      st->current = st->store->latest();
    const auto& model = st->current->model;
    if (auto ok = model.evaluate(obs, num_envs, nullptr, st->out); !ok)
      throw std::runtime_error(ok.err().message);
    const auto& spec = model.spec();
    if (spec.action == learners::action_kind::discrete) {
      const size_t n = static_cast<size_t>(spec.n);
      if (st->deterministic) {
        for (size_t r = 0; r < num_envs; ++r) {
          const float* l = &st->out.logits[r * n];
          actions[r] = static_cast<float>(std::max_element(l, l + n) - l);
        }
      } else {
        learners::sample_categorical(st->out.logits.data(), num_envs, n, st->gen, actions,
                                     nullptr);
      }
    } else {
      const size_t d = static_cast<size_t>(spec.act_dim);
      if (st->deterministic)
        std::copy(st->out.mean.begin(), st->out.mean.begin() + num_envs * d, actions);
      else
        learners::sample_gaussian(st->out.mean.data(), st->out.log_std.data(), num_envs,
                                  d, st->gen, actions, nullptr);
    }
    return st->current->version;
  };
}

} // namespace troupe::actors
