// The parameter server actor: sync mode waits for every learner and applies
// the count-weighted mean gradient once; async mode applies each gradient
// and drops those staler than max_staleness.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/messages.hpp"
#include "actors/parameter_server.hpp"
#include "tests/actors/ask.hpp"
#include "tests/actors/stepped.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::actors;
using troupe::test::fresh_seed;

namespace {

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

namespace {

// The next weights_reply in `self`'s mailbox, waited for at most 10 s.
weights_reply next_reply(caf::scoped_actor& self, const char* expected) {
  weights_reply out;
  bool got = false;
  self->receive(
    [&](weights_reply& r) {
      out = std::move(r);
      got = true;
    },
    caf::after(std::chrono::seconds(10)) >> [&] {});
  if (!got)
    FAIL("no weights_reply within 10 s: expected " << expected);
  return out;
}

} // namespace

TEST_CASE("a gradient holding a NaN or an infinity is rejected, counted for its learner "
          "and logged with its name, and never reaches Adam") {
  server_fixture fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 23;
  parameter_server_options opts;
  opts.max_staleness = 100;
  auto log = std::make_shared<std::vector<std::string>>();
  opts.log = [log](const std::string& line) { log->push_back(line); };
  const auto params = random_vector(gen, n, 1.0);
  auto server = spawn_parameter_server(*fx.sys, opts, params, {});
  auto twin = spawn_parameter_server(*fx.sys, opts, params, {}); // never sees a bad one
  caf::scoped_actor self{*fx.sys};
  // One good step first, so that Adam's moments are not zero.
  const auto g0 = random_vector(gen, n, 0.1);
  ask<weights_reply>(self, server, gradient_update{"good", 0, 8, 1e-2, g0, {}});
  ask<weights_reply>(self, twin, gradient_update{"good", 0, 8, 1e-2, g0, {}});
  const auto before = ask<parameter_server_state>(self, server, state_atom::value);
  std::uniform_int_distribution<size_t> where(0, n - 1);
  const float bad_values[] = {NAN, INFINITY, -INFINITY};
  for (float bad : bad_values) {
    CAPTURE(bad);
    auto g = random_vector(gen, n, 0.1);
    g[where(gen)] = bad;
    auto w = ask<weights_reply>(self, server, gradient_update{"sick", 1, 8, 1e-2, g, {}});
    CHECK(w.rejected);
    CHECK_FALSE(w.applied);
    CHECK(w.version == 1);
    auto after = ask<parameter_server_state>(self, server, state_atom::value);
    CHECK(after.version == before.version);
    CHECK(after.adam_steps == before.adam_steps);
    CHECK(after.params == before.params);
    CHECK(after.adam_m == before.adam_m);
    CHECK(after.adam_v == before.adam_v);
  }
  auto status = ask<parameter_server_status>(self, server, status_atom::value);
  CHECK(status.rejected == 3);
  CHECK(status.rejected_by_learner["sick"] == 3);
  CHECK(status.rejected_by_learner.count("good") == 0);
  CHECK(status.applied == 1);
  REQUIRE(!log->empty());
  CHECK(log->front().find("'sick'") != std::string::npos);
  // The next good gradient gives exactly what the twin that never saw one gives.
  const auto g1 = random_vector(gen, n, 0.1);
  auto a = ask<weights_reply>(self, server, gradient_update{"good", 1, 8, 1e-2, g1, {}});
  auto b = ask<weights_reply>(self, twin, gradient_update{"good", 1, 8, 1e-2, g1, {}});
  CHECK(a.applied);
  CHECK(a.version == 2);
  CHECK(a.params == b.params);
  for (float x : a.params)
    CHECK(std::isfinite(x));
  self->send_exit(server, caf::exit_reason::user_shutdown);
  self->send_exit(twin, caf::exit_reason::user_shutdown);
}

TEST_CASE("a sync step waits for one gradient from each learner: a restarted learner's "
          "orphaned gradient and its replacement's do not complete it") {
  server_fixture fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 17;
  parameter_server_options opts;
  opts.sync = true;
  opts.num_learners = 2;
  opts.max_grad_norm = 0;
  opts.adam.eps = 1e-5;
  opts.log = [](const std::string&) {};
  const double lr = 1e-3;
  const auto params = random_vector(gen, n, 1.0);
  auto server = spawn_parameter_server(*fx.sys, opts, params, {});
  caf::scoped_actor self{*fx.sys};
  const auto orphan_grad = random_vector(gen, n, 0.1);
  const auto a_grad = random_vector(gen, n, 0.1);
  const auto b_grad = random_vector(gen, n, 0.1);
  {
    // learner "a" sends and dies before the step completes.
    caf::scoped_actor dying{*fx.sys};
    dying->send(server, gradient_update{"a", 0, 10, lr, orphan_grad, {}});
  }
  // Its replacement, also "a", sends its own.
  self->send(server, gradient_update{"a", 0, 30, lr, a_grad, {}});
  auto status = ask<parameter_server_status>(self, server, status_atom::value);
  CHECK(status.received == 2);
  CHECK(status.version == 0);
  CHECK(status.applied == 0);
  // "b" completes the step: the mean of the replacement's and b's, not the orphan's.
  caf::scoped_actor b{*fx.sys};
  b->send(server, gradient_update{"b", 0, 50, lr, b_grad, {}});
  auto wa = next_reply(self, "the step's weights for the replacement of 'a'");
  auto wb = next_reply(b, "the step's weights for 'b'");
  std::vector<double> mean(n);
  for (size_t i = 0; i < n; ++i)
    mean[i] = (30.0 * a_grad[i] + 50.0 * b_grad[i]) / 80.0;
  auto expected = adam_first_step(params, mean, lr, opts.adam.eps);
  for (auto* w : {&wa, &wb}) {
    CHECK(w->applied);
    CHECK(w->version == 1);
    REQUIRE(w->params.size() == n);
    for (size_t i = 0; i < n; ++i)
      CHECK(w->params[i] == doctest::Approx(expected[i]).epsilon(1e-5));
  }
  status = ask<parameter_server_status>(self, server, status_atom::value);
  CHECK(status.version == 1);
  CHECK(status.applied == 2);
  self->send_exit(server, caf::exit_reason::user_shutdown);
}

TEST_CASE("a stale gradient that is dropped leaves the batch-norm buffers as they were") {
  server_fixture fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 9, nb = 6;
  parameter_server_options opts;
  opts.max_staleness = 0;
  opts.log = [](const std::string&) {};
  auto server = spawn_parameter_server(*fx.sys, opts, random_vector(gen, n, 1.0),
                                       random_vector(gen, nb, 1.0));
  caf::scoped_actor self{*fx.sys};
  const auto fresh_buffers = random_vector(gen, nb, 1.0);
  auto w = ask<weights_reply>(
    self, server,
    gradient_update{"l", 0, 4, 1e-3, random_vector(gen, n, 0.1), fresh_buffers});
  REQUIRE(w.applied);
  CHECK(w.buffers == fresh_buffers);
  // Computed on version 0, now 1: staler than max_staleness 0.
  const auto stale_buffers = random_vector(gen, nb, 1.0);
  auto d = ask<weights_reply>(
    self, server,
    gradient_update{"l", 0, 4, 1e-3, random_vector(gen, n, 0.1), stale_buffers});
  CHECK_FALSE(d.applied);
  CHECK(d.buffers == fresh_buffers);
  auto st = ask<parameter_server_state>(self, server, state_atom::value);
  CHECK(st.buffers == fresh_buffers);
  CHECK(ask<parameter_server_status>(self, server, status_atom::value).dropped == 1);
  self->send_exit(server, caf::exit_reason::user_shutdown);
}

// -- message order, stepped on CAF's test coordinator ------------------------

namespace {

// A stand-in learner on the coordinator: records each weights_reply as
// "<name> v<version> applied|unapplied" in `log`, and keeps the last one.
struct learner_stub {
  caf::actor actor;
  std::shared_ptr<weights_reply> last = std::make_shared<weights_reply>();
};

learner_stub spawn_learner_stub(test::stepped_system& fx, const std::string& name,
                                std::shared_ptr<std::vector<std::string>> log) {
  learner_stub stub;
  auto last = stub.last;
  stub.actor = fx.add(test::spawn_recorder(*fx.sys,
                                           [=](weights_reply& w) {
                                             log->push_back(fmt::format(
                                               "{} v{} {}", name, w.version,
                                               w.applied ? "applied" : "unapplied"));
                                             *last = std::move(w);
                                           }),
                      name);
  return stub;
}

} // namespace

TEST_CASE("stepped: a sync step completes with one gradient from each learner: the "
          "orphan of a restarted learner is answered unapplied at once, and the step "
          "waits for the other learner") {
  test::stepped_system fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 13;
  parameter_server_options opts;
  opts.sync = true;
  opts.num_learners = 2;
  opts.max_grad_norm = 0;
  opts.adam.eps = 1e-5;
  opts.log = [](const std::string&) {};
  const double lr = 1e-3;
  const auto params = random_vector(gen, n, 1.0);
  auto server = fx.add(
    spawn_parameter_server(*fx.sys, opts, params, {}, nullptr, server_thread::scheduler),
    "server");
  auto log = std::make_shared<std::vector<std::string>>();
  auto orphan = spawn_learner_stub(fx, "a-old", log);
  auto a = spawn_learner_stub(fx, "a", log);
  auto b = spawn_learner_stub(fx, "b", log);
  const auto orphan_grad = random_vector(gen, n, 0.1),
             a_grad = random_vector(gen, n, 0.1), b_grad = random_vector(gen, n, 0.1);
  fx.drain(); // the actors' start
  REQUIRE(fx.queue() == "[]");
  // The old "a" and its replacement both send under the name "a".
  caf::send_as(orphan.actor, server, gradient_update{"a", 0, 10, lr, orphan_grad, {}});
  caf::send_as(a.actor, server, gradient_update{"a", 0, 30, lr, a_grad, {}});
  fx.step(server);
  CHECK(fx.queue() == "[server]"); // nobody answered yet
  fx.step(server);                 // the replacement's: the orphan is answered, unapplied
  CHECK(fx.queue() == "[a-old]");
  fx.step(orphan.actor);
  CHECK(*log == std::vector<std::string>{"a-old v0 unapplied"});
  CHECK(fx.queue() == "[]"); // two gradients in, but from one learner: no step
  // b's completes the step; both waiting learners are answered, in arrival order.
  caf::send_as(b.actor, server, gradient_update{"b", 0, 50, lr, b_grad, {}});
  fx.step(server);
  CHECK(fx.queue() == "[a, b]");
  fx.drain();
  CHECK(*log ==
        std::vector<std::string>{"a-old v0 unapplied", "a v1 applied", "b v1 applied"});
  std::vector<double> mean(n);
  for (size_t i = 0; i < n; ++i)
    mean[i] = (30.0 * a_grad[i] + 50.0 * b_grad[i]) / 80.0;
  const auto expected = adam_first_step(params, mean, lr, opts.adam.eps);
  REQUIRE(a.last->params.size() == n);
  CHECK(b.last->params == a.last->params);
  for (size_t i = 0; i < n; ++i)
    CHECK(a.last->params[i] == doctest::Approx(expected[i]).epsilon(1e-5));
}

TEST_CASE(
  "stepped: of two async gradients computed on the same version with "
  "max_staleness 0, the first to arrive is applied and the second dropped whole") {
  test::stepped_system fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 11, nb = 4;
  parameter_server_options opts;
  opts.max_staleness = 0;
  opts.log = [](const std::string&) {};
  auto server = fx.add(spawn_parameter_server(*fx.sys, opts, random_vector(gen, n, 1.0),
                                              random_vector(gen, nb, 1.0), nullptr,
                                              server_thread::scheduler),
                       "server");
  auto log = std::make_shared<std::vector<std::string>>();
  auto first = spawn_learner_stub(fx, "first", log);
  auto second = spawn_learner_stub(fx, "second", log);
  const auto first_buffers = random_vector(gen, nb, 1.0),
             second_buffers = random_vector(gen, nb, 1.0);
  fx.drain(); // the actors' start
  REQUIRE(fx.queue() == "[]");
  // Both in the server's mailbox before it runs: they race as in a run.
  caf::send_as(
    first.actor, server,
    gradient_update{"first", 0, 8, 1e-3, random_vector(gen, n, 0.1), first_buffers});
  caf::send_as(
    second.actor, server,
    gradient_update{"second", 0, 8, 1e-3, random_vector(gen, n, 0.1), second_buffers});
  fx.step(server);
  CHECK(fx.queue() == "[server, first]");
  fx.step(server);
  CHECK(fx.queue() == "[first, second]");
  fx.drain();
  CHECK(*log == std::vector<std::string>{"first v1 applied", "second v1 unapplied"});
  // The dropped one changed nothing: weights and buffers are the first's step.
  CHECK(second.last->params == first.last->params);
  CHECK(first.last->buffers == first_buffers);
  CHECK(second.last->buffers == first_buffers);
  // Sent again on version 1, the second learner's gradient is applied.
  caf::send_as(
    second.actor, server,
    gradient_update{"second", 1, 8, 1e-3, random_vector(gen, n, 0.1), second_buffers});
  fx.drain();
  CHECK(log->back() == "second v2 applied");
  CHECK(second.last->buffers == second_buffers);
}
