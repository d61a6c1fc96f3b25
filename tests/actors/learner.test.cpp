// The learner: its batch preparation (GAE over time-major batches with
// next-step autoreset, against a float64 reference written episode by
// episode; the action samplers' log-probabilities), and the actor with a
// scripted runner and a real parameter server.
#include <doctest/doctest.h>

#include <cmath>
#include <mutex>
#include <optional>
#include <string>
#include <random>
#include <vector>

#include <caf/all.hpp>

#include "actors/learner.hpp"
#include "actors/messages.hpp"
#include "actors/parameter_server.hpp"
#include "actors/policy_store.hpp"
#include "base/rng.hpp"
#include "learners/ppo.hpp"
#include "learners/rollout.hpp"
#include "tests/actors/ask.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using troupe::test::fresh_seed;

TEST_CASE("GAE over an autoreset batch matches a per-environment float64 recursion that "
          "bootstraps truncations and cuts at episode ends") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const size_t steps = 37, envs = 5;
  const double gamma = 0.9 + 0.09 * unit(gen), lambda = 0.8 + 0.2 * unit(gen);
  std::vector<float> rewards(steps * envs), values((steps + 1) * envs);
  std::vector<uint8_t> term(steps * envs, 0), trunc(steps * envs, 0),
    reset(steps * envs, 0);
  for (auto& v : values)
    v = static_cast<float>(unit(gen) * 4 - 2);
  for (size_t e = 0; e < envs; ++e) {
    bool was_done = false;
    for (size_t t = 0; t < steps; ++t) {
      const size_t k = t * envs + e;
      if (was_done) {
        reset[k] = 1; // next-step autoreset: a reset, reward 0
        was_done = false;
        continue;
      }
      rewards[k] = static_cast<float>(unit(gen));
      const double u = unit(gen);
      term[k] = u < 0.1;
      trunc[k] = !term[k] && u < 0.15;
      was_done = term[k] || trunc[k];
    }
  }
  std::vector<float> adv(steps * envs), ret(steps * envs);
  std::vector<uint8_t> valid(steps * envs);
  learners::compute_gae(steps, envs, rewards.data(), term.data(), trunc.data(),
                        reset.data(), values.data(), gamma, lambda, adv.data(),
                        ret.data(), valid.data());
  // Reference: forward over each environment, every advantage as the explicit
  // discounted sum of TD errors up to its episode's end (or the batch's end).
  for (size_t e = 0; e < envs; ++e) {
    for (size_t t = 0; t < steps; ++t) {
      const size_t k = t * envs + e;
      CAPTURE(t);
      CAPTURE(e);
      if (reset[k]) {
        CHECK(valid[k] == 0);
        continue;
      }
      CHECK(valid[k] == 1);
      double sum = 0, weight = 1;
      for (size_t u = t; u < steps; ++u) {
        const size_t j = u * envs + e;
        const double next = term[j] ? 0.0 : gamma * values[j + envs];
        sum += weight * (rewards[j] + next - values[j]);
        if (term[j] || trunc[j])
          break;
        weight *= gamma * lambda;
      }
      CHECK(adv[k] == doctest::Approx(sum).epsilon(1e-5));
      CHECK(ret[k] == doctest::Approx(sum + values[k]).epsilon(1e-5));
    }
  }
}

TEST_CASE("categorical sampling reports the log-softmax of the drawn action and draws "
          "with the softmax frequencies") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  base::rng gen(seed);
  const float logits[3] = {0.3f, -1.2f, 1.1f};
  double total = 0;
  for (float l : logits)
    total += std::exp(static_cast<double>(l));
  std::vector<size_t> counts(3, 0);
  const size_t draws = 60000;
  for (size_t i = 0; i < draws; ++i) {
    float action = 0, logp = 0;
    learners::sample_categorical(logits, 1, 3, gen, &action, &logp);
    const auto a = static_cast<size_t>(action);
    REQUIRE(a < 3);
    counts[a] += 1;
    CHECK(logp == doctest::Approx(logits[a] - std::log(total)).epsilon(1e-5));
  }
  for (size_t a = 0; a < 3; ++a) {
    const double p = std::exp(static_cast<double>(logits[a])) / total;
    const double sd = std::sqrt(p * (1 - p) / draws);
    CHECK(std::abs(static_cast<double>(counts[a]) / draws - p) < 6 * sd);
  }
}

TEST_CASE("Gaussian sampling reports the log-density of the drawn action") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  base::rng gen(seed);
  const float mean[2] = {0.5f, -1.5f}, log_std[2] = {-0.3f, 0.4f};
  for (int i = 0; i < 100; ++i) {
    float a[2], logp = 0;
    learners::sample_gaussian(mean, log_std, 1, 2, gen, a, &logp);
    double ref = 0;
    for (int j = 0; j < 2; ++j) {
      const double s = std::exp(static_cast<double>(log_std[j]));
      const double z = (a[j] - mean[j]) / s;
      ref += -0.5 * z * z - std::log(s) - 0.5 * std::log(2 * M_PI);
    }
    CHECK(logp == doctest::Approx(ref).epsilon(1e-4));
  }
}

// -- the learner actor --------------------------------------------------------

namespace {

// A stand-in runner: answers each collect request with the next of its
// prepared batches, sent to the learner.
caf::behavior
scripted_runner(caf::event_based_actor* self, std::string name, caf::actor consumer,
                std::shared_ptr<std::vector<actors::trajectory_batch>> batches) {
  auto next = std::make_shared<size_t>(0);
  return {
    [=](actors::collect_atom, uint64_t n) -> uint64_t {
      for (uint64_t k = 0; k < n && *next < batches->size(); ++k) {
        auto b = (*batches)[(*next)++];
        b.runner = name;
        self->send(consumer, std::move(b));
      }
      return n;
    },
  };
}

actors::trajectory_batch random_batch(std::mt19937_64& gen, size_t steps, size_t envs) {
  std::normal_distribution<float> normal(0.0f, 0.5f);
  actors::trajectory_batch b;
  b.env_id = "CartPole-v1";
  b.num_envs = envs;
  b.steps = steps;
  b.obs_dim = 4;
  b.action_dim = 1;
  b.observations.resize((steps + 1) * envs * 4);
  for (auto& x : b.observations)
    x = normal(gen);
  b.actions.resize(steps * envs);
  for (auto& a : b.actions)
    a = static_cast<float>(gen() % 2);
  b.rewards.assign(steps * envs, 1.0f);
  b.terminated.assign(steps * envs, 0);
  b.truncated.assign(steps * envs, 0);
  b.autoreset.assign(steps * envs, 0);
  return b;
}

} // namespace

TEST_CASE("a learner skips and counts a batch with a non-finite reward, which never "
          "reaches the weights, and learns the next batch with one gradient per "
          "minibatch") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  caf::actor_system_config cfg;
  actors::register_messages(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys(cfg);
  caf::scoped_actor self{sys};

  learners::model_spec spec;
  spec.obs_dim = 4;
  spec.n = 2;
  spec.hidden = {8};
  learners::actor_critic initial(spec, seed);
  auto store = std::make_shared<actors::policy_store>(initial, 8);
  actors::parameter_server_options ps_opts;
  ps_opts.log = [](const std::string&) {};
  auto server = actors::spawn_parameter_server(
    sys, ps_opts,
    std::vector<float>(initial.params(), initial.params() + initial.param_count()), {},
    store);

  const size_t steps = 6, envs = 3;
  auto batches = std::make_shared<std::vector<actors::trajectory_batch>>();
  batches->push_back(random_batch(gen, steps, envs));
  (*batches)[0].rewards[gen() % (steps * envs)] = std::nanf("");
  batches->push_back(random_batch(gen, steps, envs));

  actors::learner_options lo;
  lo.name = "L";
  lo.spec = spec;
  learners::settings_of<learners::ppo_settings>(lo.algorithm).update_epochs = 1;
  learners::settings_of<learners::ppo_settings>(lo.algorithm).num_minibatches = 2;
  lo.anneal_lr = false;
  lo.steps_per_runner_batch = steps * envs;
  lo.log = [](const std::string&) {};
  auto budget = std::make_shared<actors::step_budget>(2 * steps * envs);
  auto learner = actors::spawn_learner(sys, lo, server, caf::actor_cast<caf::actor>(self),
                                       store, budget);
  self->monitor(learner);
  // The supervisor's part: hand the learner its runner.
  auto runner = sys.spawn(scripted_runner, std::string{"L.runner0"}, learner, batches);
  self->send(learner, actors::runner_atom::value, uint64_t{0}, runner);
  std::vector<actors::learner_report> reports;
  while (reports.size() < 2)
    self->receive([&](actors::learner_report& r) { reports.push_back(std::move(r)); },
                  test::fail_after("the learner's report of each of its two batches"));
  CHECK(reports[0].skipped);
  CHECK(reports[0].non_finite == 1);
  CHECK(reports[0].weights_version == 0);
  CHECK_FALSE(reports[1].skipped);
  CHECK(reports[1].policy_lag == 0);
  CHECK(reports[1].weights_version == 2);
  CHECK(std::isfinite(reports[1].loss_value));
  // The budget is spent: the learner ends by itself, normally.
  self->receive([&](caf::down_msg& down) { CHECK(!down.reason); },
                test::fail_after("the learner to end once its budget is spent"));
  actors::parameter_server_status status;
  self->request(server, test::wait_limit, actors::status_atom::value)
    .receive([&](actors::parameter_server_status& s) { status = s; },
             [&](caf::error&) { FAIL("no status"); });
  CHECK(status.version == 2);
  CHECK(status.applied == 2);
  // The learned batch is counted with its last gradient; the skipped one is not.
  CHECK(status.batches == 1);
  CHECK(status.env_steps == steps * envs);
  for (size_t i = 0; i < initial.param_count(); ++i)
    REQUIRE(std::isfinite(store->latest()->model.params()[i]));
  self->send_exit(server, caf::exit_reason::user_shutdown);
  self->send_exit(runner, caf::exit_reason::user_shutdown);
}

TEST_CASE("a learner skips a batch its algorithm cannot learn, logging the algorithm and "
          "the numbers, and learns the next one") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  caf::actor_system_config cfg;
  actors::register_messages(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys(cfg);
  caf::scoped_actor self{sys};
  learners::model_spec spec;
  spec.obs_dim = 4;
  spec.n = 2;
  spec.hidden = {8};
  learners::actor_critic initial(spec, seed);
  for (std::string algo : {"ppo", "impala"}) {
    CAPTURE(algo);
    auto store = std::make_shared<actors::policy_store>(initial, 8);
    actors::parameter_server_options ps_opts;
    ps_opts.log = [](const std::string&) {};
    auto server = actors::spawn_parameter_server(
      sys, ps_opts,
      std::vector<float>(initial.params(), initial.params() + initial.param_count()), {},
      store);
    const size_t steps = 3, envs = 2;
    auto batches = std::make_shared<std::vector<actors::trajectory_batch>>();
    batches->push_back(random_batch(gen, steps, envs));
    auto& bad = (*batches)[0];
    if (algo == "ppo") {
      bad.autoreset[1] = bad.autoreset[4] = 1; // 4 transitions for 5 minibatches
    } else {
      bad.behavior_logp.assign(steps * envs - 2, -0.7f); // 2 missing
    }
    batches->push_back(random_batch(gen, steps, envs));
    auto logs = std::make_shared<std::vector<std::string>>();
    auto mtx = std::make_shared<std::mutex>();
    actors::learner_options lo;
    lo.name = "L";
    lo.spec = spec;
    lo.algorithm.name = algo;
    if (algo == "ppo") {
      learners::settings_of<learners::ppo_settings>(lo.algorithm).update_epochs = 1;
      learners::settings_of<learners::ppo_settings>(lo.algorithm).num_minibatches = 5;
    }
    lo.anneal_lr = false;
    lo.steps_per_runner_batch = steps * envs;
    lo.log = [logs, mtx](const std::string& line) {
      std::lock_guard<std::mutex> guard(*mtx);
      logs->push_back(line);
    };
    auto budget = std::make_shared<actors::step_budget>(2 * steps * envs);
    auto learner = actors::spawn_learner(
      sys, lo, server, caf::actor_cast<caf::actor>(self), store, budget);
    self->monitor(learner);
    auto runner = sys.spawn(scripted_runner, std::string{"L.runner0"}, learner, batches);
    self->send(learner, actors::runner_atom::value, uint64_t{0}, runner);
    std::vector<actors::learner_report> reports;
    while (reports.size() < 2)
      self->receive([&](actors::learner_report& r) { reports.push_back(std::move(r)); },
                    test::fail_after("the learner's report of each of its two batches"));
    CHECK(reports[0].skipped);
    CHECK(reports[0].weights_version == 0);
    CHECK_FALSE(reports[1].skipped);
    CHECK(reports[1].weights_version == (algo == "ppo" ? 5u : 1u));
    self->receive([&](caf::down_msg& down) { CHECK(!down.reason); },
                  test::fail_after("the learner to end once its budget is spent"));
    std::lock_guard<std::mutex> guard(*mtx);
    REQUIRE(logs->size() == 1);
    CAPTURE((*logs)[0]);
    if (algo == "ppo")
      CHECK((*logs)[0].find("ppo: the batch has 4 transitions (3 steps x 2 environments, "
                            "2 reset steps), fewer than num_minibatches = 5; skipped") !=
            std::string::npos);
    else
      CHECK((*logs)[0].find("impala: V-trace needs the behavior log-probability of every "
                            "step; the batch has 4 for 6 steps") != std::string::npos);
    self->send_exit(server, caf::exit_reason::user_shutdown);
    self->send_exit(runner, caf::exit_reason::user_shutdown);
  }
}

TEST_CASE(
  "with one gradient in flight a learner computes each gradient before the answer "
  "to the last is taken, and every gradient is answered and applied by its end") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  caf::actor_system_config cfg;
  actors::register_messages(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys(cfg);
  caf::scoped_actor self{sys};

  learners::model_spec spec;
  spec.obs_dim = 4;
  spec.n = 2;
  spec.hidden = {8};
  const size_t steps = 6, envs = 3, batches_n = 3, minibatches = 2;
  for (size_t in_flight : {size_t{0}, size_t{1}}) {
    CAPTURE(in_flight);
    learners::actor_critic initial(spec, seed);
    auto store = std::make_shared<actors::policy_store>(initial, 8);
    actors::parameter_server_options ps_opts;
    ps_opts.max_staleness = 100;
    ps_opts.log = [](const std::string&) {};
    auto server = actors::spawn_parameter_server(
      sys, ps_opts,
      std::vector<float>(initial.params(), initial.params() + initial.param_count()), {},
      store);
    auto batches = std::make_shared<std::vector<actors::trajectory_batch>>();
    for (size_t b = 0; b < batches_n; ++b)
      batches->push_back(random_batch(gen, steps, envs));
    actors::learner_options lo;
    lo.name = "L";
    lo.spec = spec;
    learners::settings_of<learners::ppo_settings>(lo.algorithm).update_epochs = 1;
    learners::settings_of<learners::ppo_settings>(lo.algorithm).num_minibatches =
      minibatches;
    lo.anneal_lr = false;
    lo.steps_per_runner_batch = steps * envs;
    lo.cluster.emplace().gradients_in_flight = in_flight;
    lo.log = [](const std::string&) {};
    auto budget = std::make_shared<actors::step_budget>(batches_n * steps * envs);
    auto learner = actors::spawn_learner(
      sys, lo, server, caf::actor_cast<caf::actor>(self), store, budget);
    self->monitor(learner);
    auto runner = sys.spawn(scripted_runner, std::string{"L.runner0"}, learner, batches);
    self->send(learner, actors::runner_atom::value, uint64_t{0}, runner);
    size_t reports = 0;
    bool ended = false;
    while (!ended)
      self->receive([&](actors::learner_report&) { ++reports; },
                    [&](caf::down_msg& down) {
                      CHECK(!down.reason);
                      ended = true;
                    },
                    test::fail_after("the learner's reports and its end"));
    CHECK(reports == batches_n);
    actors::parameter_server_status status;
    self->request(server, test::wait_limit, actors::status_atom::value)
      .receive([&](actors::parameter_server_status& s) { status = s; },
               [&](caf::error&) { FAIL("no status"); });
    // Every gradient reached the server and was applied, the last one too
    // (taken when the learner ended); its batches' steps were counted.
    CHECK(status.applied == batches_n * minibatches);
    CHECK(status.version == batches_n * minibatches);
    CHECK(status.env_steps == batches_n * steps * envs);
    // One learner waiting for each answer computes every gradient on the
    // newest weights; with one in flight each is one version behind.
    CHECK(status.max_staleness_seen == in_flight);
    self->send_exit(server, caf::exit_reason::user_shutdown);
    self->send_exit(runner, caf::exit_reason::user_shutdown);
  }
}

namespace {

// A scripted runner that first has the server apply another learner's
// gradient, then sends its batches.
caf::behavior
meddling_runner(caf::event_based_actor* self, std::string name, caf::actor consumer,
                std::shared_ptr<std::vector<actors::trajectory_batch>> batches,
                caf::actor server, actors::gradient_update g) {
  auto next = std::make_shared<size_t>(0);
  auto meddled = std::make_shared<bool>(false);
  return {
    [=](actors::collect_atom, uint64_t n) {
      auto send_batches = [=] {
        for (uint64_t k = 0; k < n && *next < batches->size(); ++k) {
          auto b = (*batches)[(*next)++];
          b.runner = name;
          self->send(consumer, std::move(b));
        }
      };
      if (*meddled) {
        send_batches();
        return;
      }
      *meddled = true;
      self->request(server, test::wait_limit, g).then([=](actors::weights_reply& r) {
        CHECK(r.applied);
        send_batches();
      });
    },
  };
}

struct learned_run {
  actors::parameter_server_state state;
  std::vector<actors::learner_report> reports;
  std::vector<float> published; // the store's newest weights
};

// One learner of a sync run with a real parameter server learns `batches`;
// the server's state (weights, Adam's moments, counters) at the end.
// `meddle`: a gradient of another learner that the runner has the server
// apply before it hands over its first batch (after the learner took the
// server's state), so that the learner's first local steps rest on a
// version the server has left.
learned_run learn_sync(caf::actor_system& sys, const learners::model_spec& spec,
                       uint64_t seed,
                       const std::vector<actors::trajectory_batch>& batches, bool local,
                       const learners::adam_config& adam, double clip,
                       std::optional<actors::gradient_update> meddle = std::nullopt,
                       bool sync = true) {
  caf::scoped_actor self{sys};
  learners::actor_critic initial(spec, seed);
  auto store = std::make_shared<actors::policy_store>(initial, 64);
  actors::parameter_server_options ps_opts;
  ps_opts.sync = sync;
  ps_opts.num_learners = 1;
  ps_opts.adam = adam;
  ps_opts.max_grad_norm = clip;
  ps_opts.log = [](const std::string&) {};
  auto server = actors::spawn_parameter_server(
    sys, ps_opts,
    std::vector<float>(initial.params(), initial.params() + initial.param_count()), {},
    store);
  const size_t rows = batches.front().steps * batches.front().num_envs;
  actors::learner_options lo;
  lo.name = "L";
  lo.spec = spec;
  learners::settings_of<learners::ppo_settings>(lo.algorithm).update_epochs = 2;
  learners::settings_of<learners::ppo_settings>(lo.algorithm).num_minibatches = 3;
  lo.learning_rate = 1e-2; // large enough that every step moves the weights
  lo.anneal_lr = true;
  lo.steps_per_runner_batch = rows;
  lo.local_optimizer = local;
  lo.pipelined = !sync;
  lo.adam = adam;
  lo.max_grad_norm = clip;
  lo.seed = seed;
  lo.log = [](const std::string&) {};
  auto budget = std::make_shared<actors::step_budget>(batches.size() * rows);
  auto learner = actors::spawn_learner(sys, lo, server, caf::actor_cast<caf::actor>(self),
                                       store, budget);
  self->monitor(learner);
  auto shared = std::make_shared<std::vector<actors::trajectory_batch>>(batches);
  auto runner = meddle
                  ? sys.spawn(meddling_runner, std::string{"L.runner0"}, learner, shared,
                              server, *meddle)
                  : sys.spawn(scripted_runner, std::string{"L.runner0"}, learner, shared);
  self->send(learner, actors::runner_atom::value, uint64_t{0}, runner);
  learned_run out;
  bool ended = false;
  while (!ended)
    self->receive([&](actors::learner_report& r) { out.reports.push_back(std::move(r)); },
                  [&](caf::down_msg& down) {
                    CHECK(!down.reason);
                    ended = true;
                  },
                  test::fail_after("the learner's reports and its end"));
  self->request(server, test::wait_limit, actors::state_atom::value)
    .receive([&](actors::parameter_server_state& s) { out.state = std::move(s); },
             [&](caf::error&) { FAIL("no state from the parameter server"); });
  const auto latest = store->latest();
  out.published.assign(latest->model.params(),
                       latest->model.params() + latest->model.param_count());
  self->send_exit(server, caf::exit_reason::user_shutdown);
  self->send_exit(runner, caf::exit_reason::user_shutdown);
  return out;
}

} // namespace

TEST_CASE(
  "a lone learner that applies its own optimizer steps ends with the parameter "
  "server's weights, Adam state and counters bit for bit as if every gradient had "
  "made the round trip, sync and async") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  caf::actor_system_config cfg;
  actors::register_messages(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys(cfg);
  learners::model_spec spec;
  spec.obs_dim = 4;
  spec.n = 2;
  spec.hidden = {16, 16};
  const size_t steps = 8, envs = 4, nbatches = 4;
  std::vector<actors::trajectory_batch> batches;
  for (size_t b = 0; b < nbatches; ++b) {
    batches.push_back(random_batch(gen, steps, envs));
    batches.back().terminated[gen() % (steps * envs)] = 1;
  }
  learners::adam_config adam;
  adam.eps = 1e-4; // not the default: the learner must take the server's
  // A clip that binds on some gradients and not on others.
  const double clip = 0.05 + 0.1 * static_cast<double>(gen() % 4);
  CAPTURE(clip);
  for (bool sync : {true, false}) {
    CAPTURE(sync);
    const auto trip =
      learn_sync(sys, spec, seed, batches, false, adam, clip, std::nullopt, sync);
    const auto local =
      learn_sync(sys, spec, seed, batches, true, adam, clip, std::nullopt, sync);
    const uint64_t gradients = nbatches * 2 * 3;
    REQUIRE(trip.reports.size() == nbatches);
    REQUIRE(local.reports.size() == nbatches);
    for (size_t b = 0; b < nbatches; ++b) {
      CAPTURE(b);
      CHECK(local.reports[b].weights_version == trip.reports[b].weights_version);
      CHECK(local.reports[b].loss_policy == trip.reports[b].loss_policy);
      CHECK(local.reports[b].loss_value == trip.reports[b].loss_value);
      CHECK(local.reports[b].rejected == 0);
    }
    CHECK(trip.state.version == gradients);
    CHECK(local.state.version == gradients);
    CHECK(local.state.adam_steps == trip.state.adam_steps);
    CHECK(local.state.counters.applied == gradients);
    CHECK(local.state.counters.received == trip.state.counters.received);
    CHECK(local.state.counters.batches == nbatches);
    CHECK(local.state.counters.env_steps == nbatches * steps * envs);
    REQUIRE(local.state.params.size() == trip.state.params.size());
    size_t moved = 0;
    learners::actor_critic initial(spec, seed);
    for (size_t i = 0; i < trip.state.params.size(); ++i) {
      CAPTURE(i);
      REQUIRE(local.state.params[i] == trip.state.params[i]);
      REQUIRE(local.state.adam_m[i] == trip.state.adam_m[i]);
      REQUIRE(local.state.adam_v[i] == trip.state.adam_v[i]);
      REQUIRE(local.published[i] == trip.published[i]);
      moved += local.state.params[i] != initial.params()[i];
    }
    // The comparison means something: the steps moved (nearly) every weight.
    CHECK(moved > trip.state.params.size() * 9 / 10);
  }
}

TEST_CASE("a lone learner's local steps taken from a version the server has left are "
          "refused and counted, and the learner goes on from the server's state") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  caf::actor_system_config cfg;
  actors::register_messages(cfg);
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys(cfg);
  learners::model_spec spec;
  spec.obs_dim = 4;
  spec.n = 2;
  spec.hidden = {8};
  learners::actor_critic initial(spec, seed);
  std::vector<actors::trajectory_batch> batches;
  for (size_t b = 0; b < 2; ++b)
    batches.push_back(random_batch(gen, 6, 3));
  // Another learner's gradient, applied after our learner took version 0.
  actors::gradient_update g;
  g.learner = "other";
  g.samples = 1;
  g.learning_rate = 1e-3;
  g.grad.resize(initial.param_count());
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : g.grad)
    x = u(gen);
  const auto run =
    learn_sync(sys, spec, seed, batches, true, learners::adam_config{}, 0.5, g);
  REQUIRE(run.reports.size() == 2);
  const uint64_t per_batch = 2 * 3; // epochs x minibatches
  // The first batch's steps rested on version 0: refused, counted as rejected.
  CHECK(run.reports[0].rejected == per_batch);
  CHECK(run.reports[0].weights_version == 1); // the server's, taken again
  // The second batch's steps rest on the server's version 1 and land.
  CHECK(run.reports[1].rejected == 0);
  CHECK(run.reports[1].weights_version == 1 + per_batch);
  CHECK(run.state.version == 1 + per_batch);
  CHECK(run.state.counters.applied == 1 + per_batch);
  CHECK(run.state.counters.received == 1 + 2 * per_batch);
  CHECK(run.state.counters.batches == 1); // the refused batch is not in the weights
  for (size_t i = 0; i < run.state.params.size(); ++i)
    REQUIRE(run.published[i] == run.state.params[i]);
}
