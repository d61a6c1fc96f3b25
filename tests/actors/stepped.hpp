// Actor tests about message order, on CAF's deterministic test coordinator
// (caf/scheduler/test_coordinator.hpp; CAF's own test DSL reports to CAF's
// test engine, not doctest, so it is used directly). Actors spawned without
// `detached` run only when the test steps them, one message at a time, in
// the coordinator's queue order, and timers fire only when the test moves the
// clock: a test names which actor must handle the next message and checks
// what every actor has sent after each step. Blocking and detached actors
// (learners, scoped actors' receives) cannot run here.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>
#include <doctest/doctest.h>

#include "actors/messages.hpp"

namespace troupe::test {

/// An actor system on the test coordinator, with names for its actors.
struct stepped_system {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  std::vector<std::pair<caf::actor, std::string>> named;

  stepped_system() {
    actors::register_messages(cfg);
    cfg.set("scheduler.policy", caf::atom("testing"));
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
    // As CAF's own test fixture does: a clock that does not start at 0.
    sched->clock().current_time += std::chrono::hours(1);
  }

  // Every named actor is told to exit and the queue is drained, so that the
  // system's destructor (which waits for all actors) returns.
  ~stepped_system() {
    for (auto& [a, name] : named)
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    while (sched->try_run_once()) {
    }
  }

  /// Gives `a` a name for messages and keeps it to be stopped at the end.
  const caf::actor& add(const caf::actor& a, std::string label) {
    named.emplace_back(a, std::move(label));
    return a;
  }

  /// The names of the actors with a message waiting, in the order the
  /// coordinator runs them ("?" for an actor without a name): "[a, b]".
  std::string queue() const { return fmt_queue(queue_names()); }

  /// The same as a list.
  std::vector<std::string> queue_names() const {
    std::vector<std::string> out;
    for (auto* job : sched->jobs) {
      std::string label = "?";
      for (auto& [a, name] : named)
        if (dynamic_cast<caf::resumable*>(caf::actor_cast<caf::abstract_actor*>(a)) ==
            job)
          label = name;
      out.push_back(label);
    }
    return out;
  }

  /// Lets `who` handle one message; fails the test when another actor is
  /// next in line, or none.
  void step(const caf::actor& who) {
    auto q = queue_names();
    std::string label;
    for (auto& [a, name] : named)
      if (a == who)
        label = name;
    INFO("queue: " << fmt_queue(q));
    REQUIRE_MESSAGE(!q.empty(),
                    "expected " << label << " to have a message, none has one");
    REQUIRE_MESSAGE(q.front() == label,
                    "expected " << label << " next, got " << q.front());
    sched->run_once();
  }

  /// Runs every waiting message (and those they cause); at most `limit`.
  size_t drain(size_t limit = 10000) {
    size_t n = 0;
    while (n < limit && sched->try_run_once())
      ++n;
    REQUIRE_MESSAGE(n < limit, "messages still flowing after " << limit << " steps");
    return n;
  }

  static std::string fmt_queue(const std::vector<std::string>& q) {
    std::string out = "[";
    for (size_t i = 0; i < q.size(); ++i)
      out += (i ? ", " : "") + q[i];
    return out + "]";
  }
};

/// Spawns an event-based actor (on the coordinator) whose behavior is
/// `handlers`: a test's stand-in for a learner or a subscriber that records
/// what it receives.
template <class... Fs>
caf::actor spawn_recorder(caf::actor_system& sys, Fs... handlers) {
  return sys.spawn(
    [=](caf::event_based_actor*) -> caf::behavior { return {handlers...}; });
}

} // namespace troupe::test
