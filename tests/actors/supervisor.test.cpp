// The supervisor actor: stops every learner and drains the parameter server
// when its stop flag is raised, reports to its owner once every learner has
// ended (with the failure of one that failed), and forwards checkpoint
// requests. The learners here are stand-ins that tell the test what they got.
#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <set>
#include <string>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/supervisor.hpp"

using namespace troupe;
using namespace troupe::actors;

namespace {

struct supervisor_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  supervisor_fixture() {
    register_messages(cfg);
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

// A stand-in learner (or server): on stop_atom, tells `observer` its name,
// then ends normally (a learner) or stays (the server). On error_atom-like
// string "fail", ends with an error.
caf::behavior stand_in(caf::event_based_actor* self, std::string name,
                       caf::actor observer, bool quits_on_stop) {
  return {
    [=](stop_atom) {
      self->send(observer, name);
      if (quits_on_stop)
        self->quit();
    },
    [=](const std::string& order) {
      if (order == "fail")
        self->quit(caf::make_error(caf::sec::runtime_error, "injected"));
      else
        self->quit();
    },
  };
}

} // namespace

TEST_CASE("raising the stop flag stops every learner and drains the server, then the "
          "owner hears that the run was interrupted") {
  supervisor_fixture fx;
  caf::scoped_actor self{*fx.sys};
  auto observer = caf::actor_cast<caf::actor>(self);
  auto a = fx.sys->spawn(stand_in, std::string{"a"}, observer, true);
  auto b = fx.sys->spawn(stand_in, std::string{"b"}, observer, true);
  auto server = fx.sys->spawn(stand_in, std::string{"server"}, observer, false);
  auto flag = std::make_shared<std::atomic<int>>(0);
  supervisor_options opts;
  opts.learners = {a, b};
  opts.server = server;
  opts.owner = observer;
  opts.stop_flag = flag;
  opts.poll_ms = 1;
  auto sup = spawn_supervisor(*fx.sys, opts);
  flag->store(15);
  std::multiset<std::string> stopped;
  bool done = false, interrupted = false;
  std::string failure = "unset";
  while (!done) {
    self->receive([&](const std::string& who) { stopped.insert(who); },
                  [&](done_atom, bool was_interrupted, const std::string& why) {
                    done = true;
                    interrupted = was_interrupted;
                    failure = why;
                  });
  }
  // The server's notice may come after the owner's; wait for it.
  while (stopped.count("server") == 0)
    self->receive([&](const std::string& who) { stopped.insert(who); });
  CHECK(stopped.count("a") == 1);
  CHECK(stopped.count("b") == 1);
  CHECK(interrupted);
  CHECK(failure.empty());
  self->send_exit(server, caf::exit_reason::user_shutdown);
}

TEST_CASE("the owner hears of a learner that failed once every learner has ended, and "
          "checkpoint requests are forwarded") {
  supervisor_fixture fx;
  caf::scoped_actor self{*fx.sys};
  auto observer = caf::actor_cast<caf::actor>(self);
  auto a = fx.sys->spawn(stand_in, std::string{"a"}, observer, true);
  auto b = fx.sys->spawn(stand_in, std::string{"b"}, observer, true);
  supervisor_options opts;
  opts.learners = {a, b};
  opts.owner = observer;
  auto sup = spawn_supervisor(*fx.sys, opts);
  self->send(sup, ckpt_atom::value, uint64_t{40});
  uint64_t forwarded = 0;
  self->receive([&](ckpt_atom, uint64_t updates) { forwarded = updates; });
  CHECK(forwarded == 40);
  self->send(a, std::string{"fail"});
  self->send(b, std::string{"finish"});
  bool interrupted = true;
  std::string failure;
  self->receive([&](done_atom, bool was_interrupted, const std::string& why) {
    interrupted = was_interrupted;
    failure = why;
  });
  CHECK_FALSE(interrupted);
  CHECK(failure.find("injected") != std::string::npos);
}
