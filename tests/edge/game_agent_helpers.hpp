// Helpers of the game agent's and the game feeder's tests: a small policy
// and an agent over it, and a float64 reference of a discrete policy's
// log-probability.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "actors/policy_store.hpp"
#include "edge/game_agent.hpp"
#include "learners/mlp.hpp"
#include "learners/model.hpp"

namespace troupe::test {

/// A discrete actor-critic of `obs_dim` inputs and `n` actions.
inline learners::actor_critic make_model(uint64_t seed, int64_t obs_dim = 4,
                                         int64_t n = 2,
                                         std::vector<int64_t> hidden = {64, 64}) {
  learners::model_spec spec;
  spec.obs_dim = obs_dim;
  spec.n = n;
  spec.hidden = std::move(hidden);
  return learners::actor_critic(spec, seed);
}

/// An agent made with `opts`; fails the test when it cannot be made.
inline std::shared_ptr<edge::game_agent>
make_agent(edge::game_agent_options opts, std::shared_ptr<actors::policy_store> store,
           std::vector<std::shared_ptr<learners::stats_view>> views = {}) {
  auto made =
    edge::game_agent::create(std::move(opts), std::move(store), std::move(views));
  REQUIRE_MESSAGE(made.ok(), (made.ok() ? "" : made.err().message));
  return *made;
}

// log pi(a | seen) under `model`, in float64.
inline double ref_logp(const learners::actor_critic& model,
                       const std::vector<double>& seen, float action) {
  std::vector<double> params(model.params(), model.params() + model.param_count());
  std::vector<double> buffers(model.buffers(), model.buffers() + model.buffer_count());
  learners::network_cache<double> cache;
  learners::network_forward<double>(model.layout().actor, model.spec(), params.data(),
                                    buffers.data(), seen.data(), 1,
                                    learners::forward_mode::eval, cache);
  const auto& l = cache.out;
  double top = *std::max_element(l.begin(), l.end()), total = 0;
  for (double x : l)
    total += std::exp(x - top);
  return l[static_cast<size_t>(action)] - top - std::log(total);
}

} // namespace troupe::test
