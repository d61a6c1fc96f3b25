// Destroying an actor system without waiting on it forever.
#pragma once

#include <chrono>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

namespace troupe::runtime {

/// Destroys `sys` and then `cfg` on a thread of its own and waits for that at
/// most `limit`. True when the system ended in time; false when it did not
/// (the thread is then left behind, blocked in the system's destructor).
/// Call it on the thread that made the system: that thread's reference to
/// the system's logger is dropped here (with one left, the destructor would
/// wait for the logger forever).
///
/// ~actor_system waits for the thread of every detached actor until that
/// actor is destroyed, so one ended actor still referenced somewhere keeps
/// it waiting forever. A coordinator of a run across processes saw this
/// after a worker left (session::close uses this there).
bool destroy_within(std::unique_ptr<caf::actor_system> sys,
                    std::unique_ptr<caf::actor_system_config> cfg,
                    std::chrono::milliseconds limit);

} // namespace troupe::runtime
