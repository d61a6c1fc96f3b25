// No exception escapes an actor: each actor whose handler (or a callback it
// calls) throws answers the request under way with an error and ends with an
// error that names it and what was thrown; the process goes on. Every wait is
// bounded and fails with what it expected.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/env_runner.hpp"
#include "actors/exceptions.hpp"
#include "actors/learner.hpp"
#include "actors/messages.hpp"
#include "actors/parameter_server.hpp"
#include "actors/policy_store.hpp"
#include "actors/stats_keeper.hpp"
#include "actors/supervisor.hpp"
#include "envs/registry.hpp"
#include "tests/temp_folder.hpp"

using namespace troupe;
using namespace troupe::actors;

namespace {

constexpr auto wait_limit = std::chrono::seconds(10);

struct system_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  system_fixture() {
    register_messages(cfg);
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

// A log sink that throws on every line: a callback that fails inside a handler.
log_sink throwing_sink() {
  return [](const std::string& line) {
    throw std::runtime_error("log sink refused: " + line);
  };
}

// Waits (bounded) for `who`'s down message; its reason rendered.
std::string await_down(caf::scoped_actor& self, const caf::actor& who) {
  std::string reason;
  bool down = false;
  self->receive(
    [&](caf::down_msg& d) {
      down = d.source == who.address();
      reason = error_message(self->system(), d.reason);
    },
    caf::after(wait_limit) >> [&] { FAIL("expected the actor to end within 10 s"); });
  REQUIRE(down);
  return reason;
}

// Sends a request and waits (bounded) for an error answer; its text.
std::string await_error(caf::scoped_actor& self, const caf::actor& dest,
                        caf::message msg) {
  std::string problem;
  self->request(dest, wait_limit, std::move(msg))
    .receive([&](caf::message&) { FAIL("expected an error answer, got a value"); },
             [&](caf::error& e) { problem = error_message(self->system(), e); });
  return problem;
}

learners::model_spec small_spec() {
  learners::model_spec spec;
  spec.obs_dim = 4;
  spec.n = 2;
  spec.hidden = {8};
  return spec;
}

} // namespace

TEST_CASE(
  "an exception becomes an error value that names the actor and what was thrown") {
  std::vector<std::string> lines;
  auto e = exception_error("statistics keeper",
                           std::make_exception_ptr(std::out_of_range("index 7 of 3")),
                           [&](const std::string& l) { lines.push_back(l); });
  caf::actor_system_config cfg;
  register_messages(cfg);
  caf::actor_system sys{cfg};
  CHECK(error_message(sys, e) == "statistics keeper threw: index 7 of 3");
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "statistics keeper threw: index 7 of 3");
  CHECK(describe_exception(std::make_exception_ptr(42)) ==
        "an exception that is not a std::exception");
}

TEST_CASE("a statistics keeper whose handler throws ends with an error naming it") {
  system_fixture fx;
  stats_keeper_options opts;
  opts.publish_every_merges = 1;
  opts.publish_interval_ms = 0;
  opts.log = throwing_sink(); // a rejected delta is logged: the handler throws
  auto keeper = spawn_stats_keeper(*fx.sys, opts);
  caf::scoped_actor self{*fx.sys};
  self->monitor(keeper);
  self->request(keeper, wait_limit, declare_atom::value, std::string{"obs"}, uint64_t{2})
    .receive([](uint64_t) {}, [](caf::error&) { FAIL("expected the stream declared"); });
  self->send(keeper, moments_delta{"obs", "w", 10, {0.0, 0.0, 0.0}, {1.0, 1.0, 1.0}});
  auto reason = await_down(self, keeper);
  CHECK(reason.find("statistics keeper threw") != std::string::npos);
  CHECK(reason.find("log sink refused") != std::string::npos);
}

TEST_CASE("an environment runner whose policy throws answers the collect request with "
          "an error naming it and ends with it") {
  system_fixture fx;
  std::shared_ptr<envs::vector_env> env = envs::make_vector_env("CartPole-v1", 2).value();
  env_runner_options ro;
  ro.name = "r7";
  ro.steps_per_batch = 4;
  ro.log = [](const std::string&) {};
  policy_fn policy = [](const float*, size_t, base::rng&, float*,
                        float*) -> result<uint64_t> {
    throw std::logic_error("policy exploded");
  };
  caf::scoped_actor self{*fx.sys};
  auto runner =
    spawn_env_runner(*fx.sys, ro, env, policy, caf::actor_cast<caf::actor>(self));
  self->monitor(runner);
  auto problem =
    await_error(self, runner, caf::make_message(collect_atom::value, uint64_t{1}));
  CHECK(problem.find("env runner 'r7' threw: policy exploded") != std::string::npos);
  auto reason = await_down(self, runner);
  CHECK(reason.find("env runner 'r7' threw: policy exploded") != std::string::npos);
}

TEST_CASE("an environment runner whose policy returns an error ends with it, naming the "
          "runner") {
  system_fixture fx;
  std::shared_ptr<envs::vector_env> env = envs::make_vector_env("CartPole-v1", 2).value();
  env_runner_options ro;
  ro.name = "r8";
  ro.steps_per_batch = 4;
  ro.log = [](const std::string&) {};
  // A store whose model normalizes observations itself cannot act on what
  // the runner hands over: its policy returns an error instead of throwing.
  auto spec = small_spec();
  spec.obs_norm = true;
  auto store = std::make_shared<policy_store>(learners::actor_critic(spec, 3), 2);
  caf::scoped_actor self{*fx.sys};
  auto runner = spawn_env_runner(*fx.sys, ro, env, make_store_policy(store, 4),
                                 caf::actor_cast<caf::actor>(self));
  self->monitor(runner);
  auto problem =
    await_error(self, runner, caf::make_message(collect_atom::value, uint64_t{1}));
  CHECK(problem.find("env runner 'r8': the policy failed at step 0") !=
        std::string::npos);
  auto reason = await_down(self, runner);
  CHECK(reason == problem);
}

TEST_CASE("a parameter server whose handler throws answers the gradient with an error "
          "naming it and ends with it") {
  system_fixture fx;
  parameter_server_options opts;
  opts.max_staleness = 0;
  opts.log = throwing_sink(); // a dropped stale gradient is logged: the handler throws
  const std::vector<float> params(5, 0.5f);
  auto server = spawn_parameter_server(*fx.sys, opts, params, {});
  caf::scoped_actor self{*fx.sys};
  self->monitor(server);
  const std::vector<float> grad{0.1f, -0.2f, 0.3f, -0.4f, 0.5f};
  self->request(server, wait_limit, gradient_update{"a", 0, 10, 1e-3, grad, {}})
    .receive([](weights_reply&) {},
             [](caf::error&) { FAIL("expected the first gradient applied"); });
  // Computed on version 0, now 1, max_staleness 0: dropped and logged.
  auto problem = await_error(
    self, server, caf::make_message(gradient_update{"b", 0, 10, 1e-3, grad, {}}));
  CHECK(problem.find("parameter server threw: log sink refused") != std::string::npos);
  auto reason = await_down(self, server);
  CHECK(reason.find("parameter server threw") != std::string::npos);
}

TEST_CASE("a learner whose loop throws ends with an error naming it") {
  system_fixture fx;
  auto spec = small_spec();
  auto store = std::make_shared<policy_store>(learners::actor_critic(spec, 5), 2);
  // A stand-in server that refuses the weights: the learner logs that, and
  // its log sink throws.
  auto server = fx.sys->spawn([]() -> caf::behavior {
    return {[](weights_atom) -> caf::result<weights_reply> {
      return caf::make_error(caf::sec::runtime_error, "no weights today");
    }};
  });
  learner_options lo;
  lo.name = "L9";
  lo.spec = spec;
  lo.log = throwing_sink();
  caf::scoped_actor self{*fx.sys};
  auto learner = spawn_learner(*fx.sys, lo, server, caf::actor_cast<caf::actor>(self),
                               store, std::make_shared<step_budget>(100));
  self->monitor(learner);
  auto reason = await_down(self, learner);
  CHECK(reason.find("learner 'L9' threw: log sink refused") != std::string::npos);
  caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
}

TEST_CASE("a supervisor whose runner factory throws ends with an error naming it, and "
          "the owner is told") {
  system_fixture fx;
  test::temp_folder dir("supervisor-throws");
  auto spec = small_spec();
  learners::actor_critic initial(spec, 11);
  supervisor_options opts;
  auto& p = opts.cast;
  p.keeper.log = [](const std::string&) {};
  p.server.log = [](const std::string&) {};
  p.params.assign(initial.params(), initial.params() + initial.param_count());
  p.store = std::make_shared<policy_store>(initial, 4);
  p.metrics.csv_path = (dir.path / "metrics.csv").string();
  p.metrics.jsonl_path = (dir.path / "metrics.jsonl").string();
  p.metrics.quiet = true;
  learner_plan lp;
  lp.options.name = "learner0";
  lp.options.spec = spec;
  lp.options.num_runners = 1;
  lp.options.log = [](const std::string&) {};
  lp.budget = std::make_shared<step_budget>(64);
  p.learners.push_back(std::move(lp));
  p.make_runner = [](const runner_request&) -> caf::actor {
    throw std::runtime_error("factory out of order");
  };
  std::vector<std::string> lines;
  auto mtx = std::make_shared<std::mutex>();
  opts.log = [&lines, mtx](const std::string& l) {
    std::lock_guard<std::mutex> g(*mtx);
    lines.push_back(l);
  };
  caf::scoped_actor self{*fx.sys};
  opts.owner = caf::actor_cast<caf::actor>(self);
  auto sup = spawn_supervisor(*fx.sys, opts);
  self->monitor(sup);
  std::string reason;
  bool down = false;
  self->receive_while([&] { return !down; })(
    [&](caf::down_msg& d) {
      down = d.source == sup.address();
      reason = error_message(*fx.sys, d.reason);
    },
    [](caf::message&) {}, // anything else the owner gets
    caf::after(wait_limit) >>
      [&] {
        down = true;
        FAIL("expected the supervisor to end within 10 s");
      });
  CHECK(reason.find("supervisor threw: factory out of order") != std::string::npos);
  std::lock_guard<std::mutex> g(*mtx);
  REQUIRE(!lines.empty());
  CHECK(lines.back().find("supervisor threw: factory out of order") != std::string::npos);
}
