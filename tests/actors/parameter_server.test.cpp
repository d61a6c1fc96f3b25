// The parameter server actor: sync mode waits for every learner and applies
// the count-weighted mean gradient once; async mode applies each gradient
// and drops those staler than max_staleness.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/parameter_server.hpp"
#include "tests/actors/ask.hpp"

using namespace troupe;
using namespace troupe::actors;

namespace {

uint64_t fresh_seed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

struct server_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  server_fixture() {
    register_messages(cfg);
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

using test::ask;

std::vector<float> random_vector(std::mt19937_64& gen, size_t n, double scale) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<float> out(n);
  for (auto& x : out)
    x = static_cast<float>(normal(gen));
  return out;
}

// One Adam step from zero state in float64: m = (1-b1) g, v = (1-b2) g^2,
// bias-corrected m_hat = g, v_hat = g^2.
std::vector<double> adam_first_step(const std::vector<float>& p,
                                    const std::vector<double>& g, double lr, double eps) {
  std::vector<double> out(p.size());
  for (size_t i = 0; i < p.size(); ++i)
    out[i] = p[i] - lr * g[i] / (std::sqrt(g[i] * g[i]) + eps);
  return out;
}

} // namespace

TEST_CASE("sync mode waits for one gradient from every learner, then applies their "
          "count-weighted mean once") {
  server_fixture fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 37;
  const uint64_t learners = 3;
  auto params = random_vector(gen, n, 1.0);
  parameter_server_options opts;
  opts.sync = true;
  opts.num_learners = learners;
  opts.max_grad_norm = 0; // no clipping, so the step is Adam's alone
  opts.adam.eps = 1e-5;
  const double lr = 1e-3;
  auto server = spawn_parameter_server(*fx.sys, opts, params, {});
  caf::scoped_actor self{*fx.sys};
  std::vector<std::vector<float>> grads;
  std::vector<uint64_t> samples;
  std::uniform_int_distribution<uint64_t> rows(1, 500);
  for (uint64_t k = 0; k < learners; ++k) {
    grads.push_back(random_vector(gen, n, 0.1));
    samples.push_back(rows(gen));
  }
  // Two of three learners: nothing is applied and nobody is answered yet.
  for (uint64_t k = 0; k + 1 < learners; ++k)
    self->send(server,
               gradient_update{"l" + std::to_string(k), 0, samples[k], lr, grads[k], {}});
  auto status = ask<parameter_server_status>(self, server, status_atom::value);
  CHECK(status.received == learners - 1);
  CHECK(status.version == 0);
  CHECK(status.applied == 0);
  CHECK(self->mailbox().empty());
  // The last one completes the step; every learner gets version 1.
  self->send(server, gradient_update{"last", 0, samples.back(), lr, grads.back(), {}});
  std::vector<weights_reply> replies;
  for (uint64_t k = 0; k < learners; ++k)
    self->receive([&](weights_reply& w) { replies.push_back(std::move(w)); },
                  test::fail_after("a weights reply to each learner of the sync step"));
  std::vector<double> mean(n, 0.0);
  double total = 0;
  for (uint64_t k = 0; k < learners; ++k)
    total += static_cast<double>(samples[k]);
  for (uint64_t k = 0; k < learners; ++k)
    for (size_t i = 0; i < n; ++i)
      mean[i] += static_cast<double>(samples[k]) * grads[k][i] / total;
  auto expected = adam_first_step(params, mean, lr, opts.adam.eps);
  for (auto& w : replies) {
    CHECK(w.version == 1);
    CHECK(w.applied);
    REQUIRE(w.params.size() == n);
    for (size_t i = 0; i < n; ++i)
      CHECK(w.params[i] == doctest::Approx(expected[i]).epsilon(1e-5));
  }
  status = ask<parameter_server_status>(self, server, status_atom::value);
  CHECK(status.version == 1);
  CHECK(status.applied == learners);
  self->send_exit(server, caf::exit_reason::user_shutdown);
}

TEST_CASE("async mode applies each gradient as it arrives and drops, counts and answers "
          "those staler than max_staleness") {
  server_fixture fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 19;
  std::uniform_int_distribution<uint64_t> pick(0, 5);
  const uint64_t max_staleness = pick(gen);
  CAPTURE(max_staleness);
  parameter_server_options opts;
  opts.sync = false;
  opts.max_staleness = max_staleness;
  opts.log = [](const std::string&) {};
  auto server = spawn_parameter_server(*fx.sys, opts, random_vector(gen, n, 1.0), {});
  caf::scoped_actor self{*fx.sys};
  // Every gradient claims version 0: the first max_staleness + 1 are applied
  // (staleness 0 .. max_staleness), the rest dropped, weights unchanged.
  const uint64_t sent = max_staleness + 4;
  std::vector<float> weights_at_limit;
  for (uint64_t k = 0; k < sent; ++k) {
    auto w = ask<weights_reply>(
      self, server, gradient_update{"l", 0, 10, 1e-3, random_vector(gen, n, 0.1), {}});
    const bool should_apply = k <= max_staleness;
    CHECK(w.applied == should_apply);
    CHECK(w.version == std::min<uint64_t>(k + 1, max_staleness + 1));
    if (k == max_staleness)
      weights_at_limit = w.params;
    if (!should_apply)
      CHECK(w.params == weights_at_limit);
  }
  auto status = ask<parameter_server_status>(self, server, status_atom::value);
  CHECK(status.received == sent);
  CHECK(status.applied == max_staleness + 1);
  CHECK(status.dropped == sent - (max_staleness + 1));
  // A gradient on the current version is applied again.
  auto w = ask<weights_reply>(
    self, server,
    gradient_update{"l", status.version, 10, 1e-3, random_vector(gen, n, 0.1), {}});
  CHECK(w.applied);
  CHECK(w.version == status.version + 1);
  self->send_exit(server, caf::exit_reason::user_shutdown);
}

TEST_CASE("the parameter server's state round-trips through state_atom") {
  server_fixture fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 11;
  parameter_server_options opts;
  auto a = spawn_parameter_server(*fx.sys, opts, random_vector(gen, n, 1.0), {});
  auto b = spawn_parameter_server(*fx.sys, opts, random_vector(gen, n, 1.0), {});
  caf::scoped_actor self{*fx.sys};
  for (int k = 0; k < 3; ++k)
    ask<weights_reply>(
      self, a,
      gradient_update{
        "l", static_cast<uint64_t>(k), 1, 1e-2, random_vector(gen, n, 0.1), {}});
  auto st = ask<parameter_server_state>(self, a, state_atom::value);
  CHECK(ask<uint64_t>(self, b, state_atom::value, st) == 3);
  // The same next gradient gives the same weights on both.
  auto g = random_vector(gen, n, 0.1);
  auto wa = ask<weights_reply>(self, a, gradient_update{"l", 3, 1, 1e-2, g, {}});
  auto wb = ask<weights_reply>(self, b, gradient_update{"l", 3, 1, 1e-2, g, {}});
  CHECK(wa.version == 4);
  CHECK(wb.version == 4);
  CHECK(wa.params == wb.params);
  self->send_exit(a, caf::exit_reason::user_shutdown);
  self->send_exit(b, caf::exit_reason::user_shutdown);
}

TEST_CASE("a stopping sync server answers a learner waiting for a step the others will "
          "not join, applying nothing") {
  server_fixture fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 13;
  parameter_server_options opts;
  opts.sync = true;
  opts.num_learners = 2;
  auto params = random_vector(gen, n, 1.0);
  auto server = spawn_parameter_server(*fx.sys, opts, params, {});
  caf::scoped_actor self{*fx.sys};
  self->send(server, gradient_update{"a", 0, 5, 1e-3, random_vector(gen, n, 0.1), {}});
  self->send(server, stop_atom::value);
  weights_reply w;
  self->receive([&](weights_reply& r) { w = std::move(r); },
                test::fail_after("the weights reply to the pending gradient at stop"));
  CHECK_FALSE(w.applied);
  CHECK(w.version == 0);
  CHECK(w.params == params);
  // Later gradients are answered at once, unapplied.
  auto later = ask<weights_reply>(
    self, server, gradient_update{"b", 0, 5, 1e-3, random_vector(gen, n, 0.1), {}});
  CHECK_FALSE(later.applied);
  CHECK(later.params == params);
  self->send_exit(server, caf::exit_reason::user_shutdown);
}
