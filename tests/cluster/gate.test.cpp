// The coordinator's gate in one process (no connection between processes):
// what it does with a host's word that the step budget is spent, which joins
// it refuses, and how it forms the data plane's group.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <fmt/format.h>

#include "actors/messages.hpp"
#include "actors/policy_store.hpp"
#include "runtime/cluster/gate.hpp"
#include "runtime/cluster/messages.hpp"
#include "actors/metrics.hpp"
#include "base/rng.hpp"
#include "tests/cluster/gate_fixture.hpp"
#include "tests/seed.hpp"

using namespace troupe;

TEST_CASE("gate: a host that spent the step budget on its own count ends the run once") {
  caf::actor_system_config cfg;
  actors::register_messages(cfg);
  cluster::register_cluster_messages(cfg);
  cfg.set("scheduler.max-threads", 1);
  caf::actor_system sys{cfg};
  test::gate_log log;
  caf::scoped_actor supervisor{sys};
  cluster::gate_options go;
  go.token = "t";
  go.store = test::cartpole_policy_store();
  go.supervisor = caf::actor_cast<caf::actor>(supervisor);
  go.log = log.sink();
  auto gate = cluster::spawn_gate(sys, std::move(go));
  // Twice (two hosts, or a resend): the supervisor hears it once.
  supervisor->send(gate, actors::done_atom::value, std::string{"w1"});
  supervisor->send(gate, actors::done_atom::value, std::string{"w2"});
  bool told = false;
  supervisor->receive([&](actors::done_atom) { told = true; },
                      caf::after(std::chrono::seconds(30)) >> [] {});
  CHECK_MESSAGE(told, "the supervisor was not told within 30 s");
  // The gate answers in order: once this answer is here, anything it sent the
  // supervisor before it is here too.
  supervisor->request(gate, std::chrono::seconds(30), actors::status_atom::value)
    .receive([](uint64_t, uint64_t) {},
             [](caf::error& e) { FAIL("no status from the gate: " << to_string(e)); });
  CHECK(supervisor->mailbox().empty());
  {
    const auto lines = log.lines();
    REQUIRE(lines.size() == 1);
    CHECK(
      lines.front() ==
      "cluster: host w1 spent the step budget (algo.total_env_steps) on its own count; "
      "the run ends");
  }
  supervisor->send_exit(gate, caf::exit_reason::user_shutdown);
}

TEST_CASE("gate: a join that would host nothing is refused for good, and an "
          "environment-only host before any feed door is open is told to ask again") {
  caf::actor_system_config cfg;
  actors::register_messages(cfg);
  cluster::register_cluster_messages(cfg);
  cfg.load<caf::io::middleman>(); // the gate asks it for a host's address
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  test::gate_log log;
  caf::scoped_actor self{sys};
  cluster::gate_options go;
  go.token = "t";
  go.store = test::cartpole_policy_store();
  go.log = log.sink();
  auto gate = cluster::spawn_gate(sys, std::move(go));
  auto host = sys.spawn(
    [](caf::event_based_actor*) -> caf::behavior { return {[](actors::stop_atom) {}}; });
  auto join = [&](uint64_t learners, uint64_t runners) {
    cluster::join_request req;
    req.protocol = cluster::protocol_version;
    req.name = fmt::format("h{}", test::fresh_seed() % 100000);
    req.learners = learners;
    req.guest_runners = runners;
    req.runners_per_learner = 1;
    req.token = "t";
    req.host = host;
    std::string refusal;
    self->request(gate, std::chrono::seconds(30), req)
      .receive([&](cluster::welcome&) { FAIL("the join was accepted"); },
               [&](caf::error& e) {
                 CHECK(e.category() == actors::error_category);
                 refusal = actors::error_message(sys, e);
                 if (learners == 0 && runners == 0)
                   CHECK(e.code() == static_cast<uint8_t>(errc::invalid_argument));
                 else
                   CHECK(e.code() == static_cast<uint8_t>(errc::unavailable));
               });
    return refusal;
  };
  CHECK(join(0, 0) == "the coordinator refused the join: it asks for no learners and no "
                      "runners: it would host nothing");
  CHECK(join(0, 2) == "the coordinator refused the join: it hosts runners only, and no "
                      "learner host has opened its feed door yet");
  const auto lines = log.lines();
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].find("cluster: refused a join from ") == 0);
  CHECK(lines[0].find("it would host nothing") != std::string::npos);
  self->send_exit(host, caf::exit_reason::user_shutdown);
  self->send_exit(gate, caf::exit_reason::user_shutdown);
}

TEST_CASE("gate: with cluster.hosts = 0 the group forms at the first member and again at "
          "each join, a replaced epoch's waiting rendezvous fails at once, and a group "
          "left without members forms again at the next join") {
  caf::actor_system_config cfg;
  actors::register_messages(cfg);
  cluster::register_cluster_messages(cfg);
  cfg.load<caf::io::middleman>(); // the gate asks it for a host's address
  cfg.set("scheduler.max-threads", 2);
  caf::actor_system sys{cfg};
  test::gate_log log;
  caf::scoped_actor self{sys};
  caf::scoped_actor metrics{sys}; // hears the gate's hosts rows
  cluster::gate_options go;
  go.token = "t";
  go.cast.metrics = caf::actor_cast<caf::actor>(metrics);
  go.store = test::cartpole_policy_store();
  go.log = log.sink();
  go.plane.hosts = 0;
  go.plane.interface = "127.0.0.1";
  auto gate = cluster::spawn_gate(sys, std::move(go));
  auto tell = caf::actor_cast<caf::actor>(self);
  // A member host that tells the test each (epoch, rank, size) it is given.
  auto make_host = [&](const std::string& name) {
    return sys.spawn([name, tell](caf::event_based_actor*) -> caf::behavior {
      return {
        [](cluster::policy_push& p) { return p.version; },
        [name, tell](cluster::form_atom, uint64_t epoch, uint64_t rank, uint64_t size) {
          caf::anon_send(tell, name, epoch, rank, size);
        },
        [](actors::stop_atom) {},
      };
    });
  };
  auto join = [&](const std::string& name, const caf::actor& host) {
    cluster::join_request req;
    req.protocol = cluster::protocol_version;
    req.name = name;
    req.learners = 1;
    req.token = "t";
    req.host = host;
    bool joined = false;
    self->request(gate, std::chrono::seconds(30), req)
      .receive(
        [&](cluster::welcome&) { joined = true; },
        [&](caf::error& e) { FAIL(name << "'s join was refused: " << to_string(e)); });
    return joined;
  };
  struct told {
    std::string host;
    uint64_t epoch = 0, rank = 0, size = 0;
  };
  // The next `n` form messages, in any order of hosts.
  auto forms = [&](size_t n) {
    std::vector<told> out;
    for (size_t i = 0; i < n; ++i) {
      bool got = false;
      self->receive(
        [&](const std::string& h, uint64_t e, uint64_t r, uint64_t s) {
          out.push_back({h, e, r, s});
          got = true;
        },
        caf::after(std::chrono::seconds(30)) >> [] {});
      REQUIRE_MESSAGE(got, "form message " << i + 1 << " of " << n << " not within 30 s");
    }
    std::sort(out.begin(), out.end(),
              [](const told& a, const told& b) { return a.host < b.host; });
    return out;
  };
  auto set = [&](const std::string& key) {
    std::string why;
    self
      ->request(gate, std::chrono::seconds(30), cluster::store_set_atom::value,
                std::string{"t"}, key, std::string{"addr-" + key})
      .receive([](caf::ok_atom) {}, [&](caf::error& e) { why = to_string(e); });
    return why;
  };

  // The coordinator's own name is not a worker's.
  {
    cluster::join_request req;
    req.protocol = cluster::protocol_version;
    req.name = "coordinator";
    req.learners = 1;
    req.token = "t";
    req.host = make_host("coordinator");
    std::string refused;
    self->request(gate, std::chrono::seconds(30), req)
      .receive([&](cluster::welcome&) { refused = "joined"; },
               [&](caf::error& e) { refused = to_string(e); });
    CHECK(refused.find("the worker name 'coordinator' is the coordinator's own") !=
          std::string::npos);
    self->send_exit(req.host, caf::exit_reason::kill);
  }
  auto h1 = make_host("h1");
  REQUIRE(join("h1", h1));
  auto first = forms(1);
  CHECK(first[0].host == "h1");
  CHECK(first[0].epoch == 1);
  CHECK(first[0].rank == 0);
  CHECK(first[0].size == 1);
  // Epoch 1's rendezvous: one key set, a get that waits for another.
  CHECK(set("epoch-1/0").empty());
  auto waiting =
    self->request(gate, std::chrono::seconds(60), cluster::store_get_atom::value,
                  std::string{"t"}, std::string{"epoch-1/1"});
  auto h2 = make_host("h2");
  REQUIRE(join("h2", h2));
  auto second = forms(2);
  CHECK(second[0].host == "h1");
  CHECK(second[1].host == "h2");
  for (auto& t : second) {
    CHECK(t.epoch == 2);
    CHECK(t.size == 2);
  }
  CHECK(second[0].rank != second[1].rank);
  // The waiting get of epoch 1 fails, naming the epochs (not its time-out).
  std::string failed;
  waiting.receive([&](std::string& v) { failed = "answered " + v; },
                  [&](caf::error& e) { failed = to_string(e); });
  CAPTURE(failed);
  CHECK(failed.find("rendezvous: the group of epoch 1 is replaced by epoch 2 (key "
                    "'epoch-1/1')") != std::string::npos);
  // Epoch 1's keys are gone and refused; epoch 2's work.
  CHECK(set("epoch-1/1").find("replaced by epoch 2") != std::string::npos);
  std::string old;
  self
    ->request(gate, std::chrono::seconds(30), cluster::store_get_atom::value,
              std::string{"t"}, std::string{"epoch-1/0"})
    .receive([&](std::string& v) { old = "answered " + v; },
             [&](caf::error& e) { old = to_string(e); });
  CHECK(old.find("replaced by epoch 2") != std::string::npos);
  CHECK(set("epoch-2/0").empty());
  std::string fresh;
  self
    ->request(gate, std::chrono::seconds(30), cluster::store_get_atom::value,
              std::string{"t"}, std::string{"epoch-2/0"})
    .receive([&](std::string& v) { fresh = v; },
             [&](caf::error& e) { fresh = to_string(e); });
  CHECK(fresh == "addr-epoch-2/0");

  // Both members lost: no empty epoch; the next member forms epoch 3 alone.
  self->send_exit(h1, caf::exit_reason::kill);
  auto third = forms(1);
  CHECK(third[0].host == "h2");
  CHECK(third[0].epoch == 3);
  CHECK(third[0].size == 1);
  self->send_exit(h2, caf::exit_reason::kill);
  // The gate's row of 0 live hosts: it has handled the loss.
  bool none_left = false;
  while (!none_left) {
    bool got = false;
    metrics->receive(
      [&](actors::hosts_atom, uint64_t hosts, uint64_t, uint64_t) {
        got = true;
        none_left = hosts == 0;
      },
      caf::after(std::chrono::seconds(30)) >> [] {});
    REQUIRE_MESSAGE(got, "no hosts row within 30 s while waiting for 0 live hosts");
  }
  auto h3 = make_host("h3");
  REQUIRE(join("h3", h3));
  auto fourth = forms(1);
  CHECK(fourth[0].host == "h3");
  CHECK(fourth[0].epoch == 4);
  CHECK(fourth[0].size == 1);
  const auto lines = log.lines();
  CHECK(std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("cluster: the data plane has no member left (host h2 of rank 0 was "
                  "lost); its group forms again when a host with learners joins") == 0;
  }));
  self->send_exit(h3, caf::exit_reason::kill);
  self->send_exit(gate, caf::exit_reason::user_shutdown);
}
