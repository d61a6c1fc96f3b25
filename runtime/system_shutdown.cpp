#include "runtime/system_shutdown.hpp"

#include <future>
#include <thread>
#include <utility>

#include <caf/logger.hpp>

namespace troupe::runtime {

bool destroy_within(std::unique_ptr<caf::actor_system> sys,
                    std::unique_ptr<caf::actor_system_config> cfg,
                    std::chrono::milliseconds limit) {
  // The thread that made an actor system holds its logger in a thread-local
  // reference, and ~actor_system waits until the logger is destroyed: a
  // system destroyed on another thread waits forever unless this thread
  // lets go of it first (which the caller's thread is expected to be).
  caf::logger::set_current_actor_system(nullptr);
  auto done = std::make_shared<std::promise<void>>();
  auto ended = done->get_future();
  std::thread([sys = std::move(sys), cfg = std::move(cfg), done]() mutable {
    sys.reset();
    cfg.reset();
    done->set_value();
  }).detach();
  return ended.wait_for(limit) == std::future_status::ready;
}

} // namespace troupe::runtime

namespace troupe::runtime {

bool end_system(std::unique_ptr<caf::actor_system> sys,
                std::unique_ptr<caf::actor_system_config> cfg, system_end how,
                std::chrono::milliseconds limit) {
  switch (how) {
  case system_end::wait:
    sys.reset();
    cfg.reset();
    return true;
  case system_end::bounded:
    return destroy_within(std::move(sys), std::move(cfg), limit);
  case system_end::leave:
    // Deliberately never destroyed (see system_end::leave): the process ends
    // before it would matter.
    (void)sys.release();
    (void)cfg.release();
    return false;
  }
  return false;
}

} // namespace troupe::runtime
