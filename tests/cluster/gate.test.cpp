// The coordinator's gate in one process (no middleman): what it does with a
// host's word that the step budget is spent.
#include <doctest/doctest.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/policy_store.hpp"
#include "learners/model.hpp"
#include "runtime/cluster/gate.hpp"
#include "runtime/cluster/messages.hpp"

using namespace troupe;

TEST_CASE("gate: a host that spent the step budget on its own count ends the run once") {
  caf::actor_system_config cfg;
  actors::register_messages(cfg);
  cluster::register_cluster_messages(cfg);
  cfg.set("scheduler.max-threads", 1);
  caf::actor_system sys{cfg};
  auto log = std::make_shared<std::vector<std::string>>();
  auto mtx = std::make_shared<std::mutex>();
  caf::scoped_actor supervisor{sys};
  cluster::gate_options go;
  go.token = "t";
  learners::model_spec spec;
  spec.obs_dim = 4;
  spec.n = 2;
  go.store = std::make_shared<actors::policy_store>(learners::actor_critic(spec, 1), 4);
  go.supervisor = caf::actor_cast<caf::actor>(supervisor);
  go.log = [log, mtx](const std::string& line) {
    std::lock_guard<std::mutex> g(*mtx);
    log->push_back(line);
  };
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
    std::lock_guard<std::mutex> g(*mtx);
    REQUIRE(log->size() == 1);
    CHECK(log->front() ==
          "cluster: host w1 spent the step budget (algo.total_env_steps) on its own count; "
          "the run ends");
  }
  supervisor->send_exit(gate, caf::exit_reason::user_shutdown);
}
