// The standby replica: a coordinator's stand-in for the parameter server when
// it takes no part in the data plane's rounds. It holds the newest state it
// was given or fetched from its source, answers what it holds when the source
// fails, and refuses a state of another size and any gradient.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/policy_store.hpp"
#include "actors/replica.hpp"
#include "tests/actors/ask.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::actors;
using troupe::test::ask;
using troupe::test::fresh_seed;

namespace {

std::vector<float> random_floats(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v)
    x = normal(rng);
  return v;
}

parameter_server_state random_state(std::mt19937_64& rng, size_t params, size_t buffers,
                                    uint64_t version) {
  parameter_server_state s;
  s.version = version;
  s.adam_steps = static_cast<int64_t>(version);
  s.params = random_floats(rng, params);
  s.buffers = random_floats(rng, buffers);
  s.adam_m = random_floats(rng, params);
  s.adam_v = random_floats(rng, params);
  s.counters.applied = rng() % 1000;
  s.counters.rejected = rng() % 7;
  return s;
}

void check_same(const parameter_server_state& got, const parameter_server_state& want) {
  CHECK(got.version == want.version);
  CHECK(got.adam_steps == want.adam_steps);
  CHECK(got.params == want.params);
  CHECK(got.buffers == want.buffers);
  CHECK(got.adam_m == want.adam_m);
  CHECK(got.adam_v == want.adam_v);
  CHECK(got.counters.applied == want.counters.applied);
}

// A source that answers each (state_atom) with the next state of `states`
// and then fails, and each (rounds_atom) with `rounds`.
caf::behavior scripted_source(caf::event_based_actor*,
                              std::vector<parameter_server_state> states,
                              replica_status rounds) {
  auto next = std::make_shared<size_t>(0);
  return {
    [states, next](state_atom) -> caf::result<parameter_server_state> {
      if (*next >= states.size())
        return to_caf_error(make_error(errc::unavailable, "no member answered"));
      return states[(*next)++];
    },
    [rounds](rounds_atom) { return rounds; },
  };
}

} // namespace

TEST_CASE("a standby replica holds its start, takes newer states given or fetched from "
          "its source, keeps what it holds when the source fails, and refuses a state "
          "of another size and any gradient") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  caf::actor_system_config cfg;
  register_messages(cfg);
  caf::actor_system sys(cfg);
  caf::scoped_actor self(sys);
  const size_t np = 5 + rng() % 50, nb = rng() % 4;
  const auto start = random_state(rng, np, nb, 100 + rng() % 100);
  standby_options so;
  so.host = "coordinator";
  auto standby = spawn_standby_replica(sys, so, random_floats(rng, np),
                                       random_floats(rng, nb), nullptr, start);

  // No source yet: what it started from (a checkpoint's state).
  check_same(ask<parameter_server_state>(self, standby, state_atom::value), start);
  CHECK(ask<parameter_server_status>(self, standby, status_atom::value).version ==
        start.version);

  // A newer state given is kept; an older one is ignored.
  auto newer = random_state(rng, np, nb, start.version + 1 + rng() % 10);
  CHECK(ask<uint64_t>(self, standby, state_atom::value, newer) == newer.version);
  auto older = random_state(rng, np, nb, start.version - 1);
  CHECK(ask<uint64_t>(self, standby, state_atom::value, older) == newer.version);
  check_same(ask<parameter_server_state>(self, standby, state_atom::value), newer);

  // Another model's size is refused, naming both.
  auto wrong = random_state(rng, np + 1, nb, newer.version + 1);
  std::string why;
  self->request(standby, test::wait_limit, state_atom::value, wrong)
    .receive([&](uint64_t) { why = "accepted"; },
             [&](caf::error& e) { why = sys.render(e); });
  CAPTURE(why);
  CHECK(why.find(std::to_string(np + 1)) != std::string::npos);
  CHECK(why.find(std::to_string(np)) != std::string::npos);

  // A source: its state is fetched and kept; once it fails, what is held.
  auto fetched = random_state(rng, np, nb, newer.version + 5);
  replica_status rounds;
  rounds.rounds = fetched.version;
  rounds.group_size = 2;
  rounds.weights_hash = weights_hash(fetched.params, fetched.buffers);
  auto source =
    sys.spawn(scripted_source, std::vector<parameter_server_state>{fetched}, rounds);
  self->send(standby, source_atom::value, source);
  check_same(ask<parameter_server_state>(self, standby, state_atom::value), fetched);
  check_same(ask<parameter_server_state>(self, standby, state_atom::value), fetched);
  const auto r = ask<replica_status>(self, standby, rounds_atom::value);
  CHECK(r.rounds == rounds.rounds);
  CHECK(r.weights_hash == rounds.weights_hash);

  // No learner steps here: a gradient is refused, naming its learner.
  gradient_update g;
  g.learner = "w1.learner0";
  g.grad.assign(np, 0.0f);
  self->request(standby, test::wait_limit, g)
    .receive([&](weights_reply&) { why = "answered"; },
             [&](caf::error& e) { why = sys.render(e); });
  CAPTURE(why);
  CHECK(why.find("w1.learner0") != std::string::npos);
  self->send_exit(source, caf::exit_reason::user_shutdown);
  self->send_exit(standby, caf::exit_reason::user_shutdown);
}
