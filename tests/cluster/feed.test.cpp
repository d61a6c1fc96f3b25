// A learner host's feed door in one process (no connection between
// processes): the token it asks of a guest runner and of a policy
// subscription, the live learners it hands runners to in turn, and the policy
// versions it pushes, one under way at a time and the newest next. The
// environment-only host's side, across processes: tests/cluster/data_plane.test.cpp.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/policy_store.hpp"
#include "base/rng.hpp"
#include "runtime/cluster/feed.hpp"
#include "runtime/cluster/messages.hpp"
#include "tests/cluster/gate_fixture.hpp"
#include "tests/seed.hpp"

using namespace troupe;

namespace {

constexpr auto wait_limit = std::chrono::seconds(30);

struct door_fixture {
  door_fixture() {
    actors::register_messages(cfg);
    cluster::register_cluster_messages(cfg);
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
};

// The error text of a refused request, or empty when it was answered.
template <class... Ts>
std::string refusal(caf::scoped_actor& self, const caf::actor& to, Ts&&... xs) {
  std::string why = "(no answer)";
  self->request(to, wait_limit, std::forward<Ts>(xs)...)
    .receive([&](uint64_t) { why.clear(); },
             [&](caf::error& e) { why = actors::error_message(self->system(), e); });
  return why;
}

} // namespace

TEST_CASE_FIXTURE(door_fixture,
                  "door: a guest runner or a policy subscription without the run's "
                  "token is refused naming the host, and with it runners go to the live "
                  "learners in turn") {
  caf::scoped_actor self{*sys};
  caf::scoped_actor l1{*sys}, l2{*sys}, runner{*sys};
  const caf::actor a1 = caf::actor_cast<caf::actor>(l1);
  const caf::actor a2 = caf::actor_cast<caf::actor>(l2);
  // The supervisor's live learners: a1 and a2, with a null slot (a learner
  // being restarted) between them.
  auto supervisor = sys->spawn([a1, a2](caf::event_based_actor*) -> caf::behavior {
    return {[a1, a2](actors::learners_atom) {
      return std::vector<caf::actor>{a1, caf::actor{}, a2};
    }};
  });
  cluster::door_options o;
  o.token = "secret";
  o.host = "w1";
  o.supervisor = supervisor;
  o.store = test::cartpole_policy_store();
  auto door = cluster::spawn_door(*sys, o);
  const caf::actor r = caf::actor_cast<caf::actor>(runner);

  auto why = refusal(self, door, actors::runner_atom::value, std::string{"wrong"},
                     std::string{"e1.runner0"}, r, uint64_t{1});
  CHECK(why.find("door of host w1: guest runner 'e1.runner0' refused: wrong token") !=
        std::string::npos);
  why = refusal(self, door, actors::subscribe_atom::value, std::string{""},
                caf::actor_cast<caf::actor>(self));
  CHECK(why.find("door of host w1: a policy subscription refused: wrong token") !=
        std::string::npos);
  why = refusal(self, door, actors::runner_atom::value, std::string{"secret"},
                std::string{"e1.runner0"}, caf::actor{}, uint64_t{1});
  CHECK(why.find("needs a name and an actor") != std::string::npos);

  // Three runners: the first and third to a1, the second to a2.
  std::vector<uint64_t> answered;
  for (int i = 0; i < 3; ++i)
    self
      ->request(door, wait_limit, actors::runner_atom::value, std::string{"secret"},
                fmt::format("e1.runner{}", i), r, uint64_t(10 + i))
      .receive([&](uint64_t learner) { answered.push_back(learner); },
               [&](caf::error& e) {
                 FAIL("refused: " << actors::error_message(self->system(), e));
               });
  CHECK(answered == std::vector<uint64_t>{0, 1, 0});
  // Each with its hand-off number, which the learner passes on to the runner.
  auto handed = [&](caf::scoped_actor& learner, const std::string& expected,
                    uint64_t handoff) {
    std::string name;
    caf::actor got;
    uint64_t number = 0;
    learner->receive(
      [&](actors::runner_atom, std::string& n, caf::actor& a, uint64_t h) {
        name = std::move(n);
        got = std::move(a);
        number = h;
      },
      caf::after(wait_limit) >> [] {});
    CHECK(name == expected);
    CHECK(got == r);
    CHECK(number == handoff);
  };
  handed(l1, "e1.runner0", 10);
  handed(l2, "e1.runner1", 11);
  handed(l1, "e1.runner2", 12);
  self->send_exit(door, caf::exit_reason::user_shutdown);
  self->send_exit(supervisor, caf::exit_reason::user_shutdown);
}

TEST_CASE_FIXTURE(door_fixture,
                  "door: a subscriber is pushed each new version with its weights, one "
                  "under way at a time, the newest next") {
  caf::scoped_actor self{*sys}, taker{*sys};
  auto store = test::cartpole_policy_store();
  cluster::door_options o;
  o.token = "secret";
  o.host = "w1";
  o.supervisor = caf::actor_cast<caf::actor>(self);
  o.store = store;
  auto door = cluster::spawn_door(*sys, o);
  uint64_t at = 99;
  self
    ->request(door, wait_limit, actors::subscribe_atom::value, std::string{"secret"},
              caf::actor_cast<caf::actor>(taker))
    .receive([&](uint64_t v) { at = v; },
             [&](caf::error& e) {
               FAIL("refused: " << actors::error_message(self->system(), e));
             });
  CHECK(at == store->latest()->version);

  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  base::rng gen(seed);
  const size_t np = store->latest()->model.param_count();
  const size_t nb = store->latest()->model.buffer_count();
  auto weights_of = [&](uint64_t version) {
    std::vector<float> p(np), b(nb);
    for (auto& x : p)
      x = static_cast<float>(gen.uniform(-0.5, 0.5));
    for (auto& x : b)
      x = static_cast<float>(version);
    return std::make_pair(p, b);
  };
  // Versions 1, 2 and 3 before the subscriber answers: it gets 1, then 3.
  std::vector<std::pair<std::vector<float>, std::vector<float>>> published(5);
  auto publish = [&](uint64_t v) {
    published[v] = weights_of(v);
    store->publish(v, published[v].first.data(), published[v].second.data());
  };
  publish(1);
  // The push of version 1 is taken, then answered after 2 and 3 are out.
  auto take = [&](uint64_t expected, const std::function<void()>& before_answer) {
    bool got = false;
    taker->receive(
      [&](cluster::policy_push& p) {
        got = true;
        CHECK(p.version == expected);
        CHECK(p.params == published[expected].first);
        CHECK(p.buffers == published[expected].second);
        before_answer();
        return p.version;
      },
      caf::after(wait_limit) >> [] {});
    REQUIRE_MESSAGE(got, "no push of version " << expected << " within 30 s");
  };
  take(1, [&] {
    publish(2);
    publish(3);
  });
  take(3, [] {});
  publish(4);
  take(4, [] {});
  self->send_exit(door, caf::exit_reason::user_shutdown);
}
