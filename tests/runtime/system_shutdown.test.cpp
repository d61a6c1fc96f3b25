// runtime::destroy_within: an actor system whose actors have ended is
// destroyed in time; one that an ended detached actor still referenced keeps
// waiting is left behind, and the call returns false instead of hanging.
#include <doctest/doctest.h>

#include <chrono>
#include <memory>

#include <caf/all.hpp>

#include "runtime/system_shutdown.hpp"

using troupe::runtime::destroy_within;

namespace {

caf::behavior idle(caf::event_based_actor*) {
  return {[](int x) { return x; }};
}

// A strong reference that outlives the system on purpose, reachable from a
// global so that LeakSanitizer does not count it (the test leaves that
// system's destructor blocked on its thread).
caf::actor* kept_alive = nullptr;

} // namespace

TEST_CASE("destroy_within destroys a system whose actors ended, and gives up on one "
          "that an ended but still referenced detached actor keeps waiting") {
  SUBCASE("ended actors, no reference left: destroyed in time") {
    auto cfg = std::make_unique<caf::actor_system_config>();
    auto sys = std::make_unique<caf::actor_system>(*cfg);
    {
      auto detached = sys->spawn<caf::detached>(idle);
      auto scheduled = sys->spawn(idle);
      caf::anon_send_exit(detached, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(scheduled, caf::exit_reason::user_shutdown);
    }
    CHECK(destroy_within(std::move(sys), std::move(cfg), std::chrono::seconds(60)));
  }
  SUBCASE("an ended detached actor still referenced: false, the system left behind") {
    auto cfg = std::make_unique<caf::actor_system_config>();
    auto sys = std::make_unique<caf::actor_system>(*cfg);
    auto detached = sys->spawn<caf::detached>(idle);
    kept_alive = new caf::actor(detached);
    caf::anon_send_exit(detached, caf::exit_reason::user_shutdown);
    detached = nullptr;
    // ~actor_system waits for that actor's thread until the actor is
    // destroyed, which the reference above prevents: never in time.
    CHECK_FALSE(
      destroy_within(std::move(sys), std::move(cfg), std::chrono::milliseconds(500)));
  }
}
