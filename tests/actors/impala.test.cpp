// IMPALA's learner takes mu's log-probabilities from the batch (recorded by
// the store policy when it acted) instead of recomputing the behavior
// policy. When the policy is not stale the two must give the same V-trace
// loss and gradient: checked against a float64 reference that recomputes mu
// with the float64 forward pass, and through the learner actor (a batch with
// the recorded log-probabilities against the same batch without them).
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/learner.hpp"
#include "actors/messages.hpp"
#include "actors/parameter_server.hpp"
#include "actors/policy_store.hpp"
#include "base/rng.hpp"
#include "learners/impala.hpp"
#include "learners/backend.hpp"
#include "learners/losses.hpp"
#include "tests/actors/ask.hpp"
#include "tests/seed.hpp"

using namespace troupe;

namespace {

double relative_distance(const std::vector<float>& a, const std::vector<double>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

// A stand-in runner that answers the first collect request with `batch`.
caf::behavior one_batch_runner(caf::event_based_actor* self, std::string name,
                               caf::actor consumer, actors::trajectory_batch batch) {
  return {
    [=](actors::collect_atom, uint64_t) mutable -> uint64_t {
      batch.runner = name;
      self->send(consumer, std::move(batch));
      return 1;
    },
  };
}

// The report of an IMPALA learner that learns `batch` with weights `initial`
// (version 0 on the server and in the store).
actors::learner_report learn_one_batch(const learners::actor_critic& initial,
                                       const actors::trajectory_batch& batch) {
  caf::actor_system_config cfg;
  actors::register_messages(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys(cfg);
  caf::scoped_actor self{sys};
  auto store = std::make_shared<actors::policy_store>(initial, 4);
  actors::parameter_server_options ps_opts;
  ps_opts.log = [](const std::string&) {};
  auto server = actors::spawn_parameter_server(
    sys, ps_opts,
    std::vector<float>(initial.params(), initial.params() + initial.param_count()), {},
    store);
  actors::learner_options lo;
  lo.name = "L";
  lo.algorithm.name = "impala";
  lo.spec = initial.spec();
  learners::settings_of<learners::impala_settings>(lo.algorithm).loss.ent_coef = 0.03;
  lo.anneal_lr = false;
  lo.steps_per_runner_batch = batch.steps * batch.num_envs;
  lo.log = [](const std::string&) {};
  auto budget = std::make_shared<actors::step_budget>(lo.steps_per_runner_batch);
  auto learner = actors::spawn_learner(sys, lo, server, caf::actor_cast<caf::actor>(self),
                                       store, budget);
  // The supervisor's part: hand the learner its runner.
  auto runner = sys.spawn(one_batch_runner, std::string{"L.runner0"}, learner, batch);
  self->send(learner, actors::runner_atom::value, uint64_t{0}, runner);
  actors::learner_report report;
  self->receive([&](actors::learner_report& r) { report = std::move(r); },
                test::fail_after("the learner's report of its one batch"));
  self->send_exit(learner, caf::exit_reason::user_shutdown);
  self->send_exit(runner, caf::exit_reason::user_shutdown);
  self->send_exit(server, caf::exit_reason::user_shutdown);
  return report;
}

} // namespace

TEST_CASE("V-trace with the log-probabilities the store policy recorded equals V-trace "
          "with the behavior policy recomputed in float64 when the policy is not stale") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (bool box : {false, true}) {
    CAPTURE(box);
    learners::model_spec spec;
    spec.obs_dim = 4;
    spec.hidden = {32, 16};
    if (box) {
      spec.action = learners::action_kind::box;
      spec.act_dim = 2;
    } else {
      spec.n = 3;
    }
    learners::actor_critic model(spec, rng());
    // A non-zero log-std, so that the Gaussian head's scale matters.
    if (box)
      for (int64_t j = 0; j < spec.act_dim; ++j)
        model.params()[model.layout().log_std + j] = 0.3f * static_cast<float>(j) - 0.2f;
    auto store = std::make_shared<actors::policy_store>(model, 2);
    const size_t steps = 12, envs = 9, n = steps * envs;
    const size_t ad = box ? static_cast<size_t>(spec.act_dim) : 1;
    auto policy = actors::make_store_policy(store, steps);
    base::rng gen(rng());
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> obs((n + envs) * 4), actions(n * ad), recorded(n);
    std::vector<float> rewards(n), discounts(n);
    for (auto& x : obs)
      x = 1.5f * normal(rng);
    for (size_t t = 0; t < steps; ++t)
      REQUIRE(policy(&obs[t * envs * 4], envs, gen, &actions[t * envs * ad],
                     &recorded[t * envs])
                .ok());
    for (size_t i = 0; i < n; ++i) {
      rewards[i] = normal(rng);
      discounts[i] = u(rng) < 0.1f ? 0.0f : 0.99f;
    }
    std::vector<int64_t> indices(n);
    for (size_t i = 0; i < n; ++i)
      indices[i] = static_cast<int64_t>(actions[i]);

    // The learner's path: float32, mu taken from the recorded log-probabilities.
    auto backend = learners::make_cpu_backend(spec, learners::adam_config{});
    REQUIRE(backend->load(model.params(), model.buffers()));
    learners::vtrace_batch<float> b32{steps,
                                      envs,
                                      obs.data(),
                                      box ? nullptr : indices.data(),
                                      box ? actions.data() : nullptr,
                                      recorded.data(),
                                      rewards.data(),
                                      discounts.data()};
    learners::vtrace_config config;
    config.ent_coef = 0.03;
    auto report = backend->vtrace_gradient(b32, config);
    REQUIRE(report);
    std::vector<float> grad(model.param_count());
    REQUIRE(backend->read_gradient(grad.data()));

    // The reference: float64 throughout, mu recomputed with the weights the
    // policy acted with (one forward pass gives log pi = log mu).
    auto widen = [](const std::vector<float>& v) {
      return std::vector<double>(v.begin(), v.end());
    };
    auto obs64 = widen(obs), acts64 = widen(actions), rew64 = widen(rewards),
         disc64 = widen(discounts);
    std::vector<double> mu64(n, 0.0);
    learners::vtrace_batch<double> b64{steps,
                                       envs,
                                       obs64.data(),
                                       box ? nullptr : indices.data(),
                                       box ? acts64.data() : nullptr,
                                       mu64.data(),
                                       rew64.data(),
                                       disc64.data()};
    std::vector<double> p64(model.params(), model.params() + model.param_count());
    std::vector<double> buf64(model.buffers(), model.buffers() + model.buffer_count());
    std::vector<double> g64(p64.size());
    learners::train_options options;
    learners::loss_workspace<double> ws;
    learners::vtrace_targets_buffer<double> targets;
    learners::vtrace_loss_and_grad(spec, model.layout(), p64.data(), buf64.data(), b64,
                                   config, options, targets, ws, g64.data());
    for (size_t i = 0; i < n; ++i) {
      CAPTURE(i);
      mu64[i] = ws.head.logp[i];
      REQUIRE(recorded[i] == doctest::Approx(mu64[i]).epsilon(1e-5).scale(1.0));
    }
    auto ref =
      learners::vtrace_loss_and_grad(spec, model.layout(), p64.data(), buf64.data(), b64,
                                     config, options, targets, ws, g64.data());
    CHECK(report->loss == doctest::Approx(ref.loss).epsilon(1e-5));
    CHECK(report->policy_loss == doctest::Approx(ref.policy_loss).epsilon(1e-5));
    CHECK(report->entropy == doctest::Approx(ref.entropy).epsilon(1e-5));
    CHECK(relative_distance(grad, g64) <= 1e-5);
  }
}

TEST_CASE(
  "an IMPALA learner learns an on-policy batch with its recorded log-probabilities "
  "as it does by recomputing the behavior policy") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  learners::model_spec spec;
  spec.obs_dim = 4;
  spec.n = 2;
  spec.hidden = {16, 16};
  learners::actor_critic initial(spec, rng());
  const size_t steps = 8, envs = 5, n = steps * envs;
  actors::trajectory_batch b;
  b.env_id = "CartPole-v1";
  b.num_envs = envs;
  b.steps = steps;
  b.obs_dim = 4;
  b.action_dim = 1;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  b.observations.resize((steps + 1) * envs * 4);
  for (auto& x : b.observations)
    x = normal(rng);
  b.actions.resize(n);
  b.behavior_logp.resize(n);
  auto store = std::make_shared<actors::policy_store>(initial, 2);
  auto policy = actors::make_store_policy(store, steps);
  base::rng gen(rng());
  for (size_t t = 0; t < steps; ++t)
    REQUIRE(policy(&b.observations[t * envs * 4], envs, gen, &b.actions[t * envs],
                   &b.behavior_logp[t * envs])
              .ok());
  b.rewards.resize(n);
  for (auto& r : b.rewards)
    r = normal(rng);
  b.terminated.assign(n, 0);
  b.truncated.assign(n, 0);
  b.autoreset.assign(n, 0);
  b.terminated[rng() % n] = 1;
  b.policy_version = 0;

  const auto recorded = learn_one_batch(initial, b);
  auto without = b;
  without.behavior_logp.clear();
  const auto recomputed = learn_one_batch(initial, without);
  REQUIRE_FALSE(recorded.skipped);
  REQUIRE_FALSE(recomputed.skipped);
  CHECK(recorded.policy_lag == 0);
  CHECK(recorded.weights_version == 1);
  CHECK(std::isfinite(recorded.loss_policy));
  CHECK(recorded.loss_policy == doctest::Approx(recomputed.loss_policy).epsilon(1e-5));
  CHECK(recorded.loss_value == doctest::Approx(recomputed.loss_value).epsilon(1e-5));
  CHECK(recorded.entropy == doctest::Approx(recomputed.entropy).epsilon(1e-5));
}
