// Ending an actor system: waiting for it, waiting a bounded time, or leaving
// it to the process's end.
#pragma once

#include <chrono>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

namespace troupe::runtime {

/// How a run's actor system ends (runtime::driver owns the choice).
enum class system_end {
  /// Destroyed on the caller's thread, waiting as long as that takes: a run in
  /// one process, whose actors all end with it.
  wait,
  /// Destroyed on a thread of its own, waited for at most a limit
  /// (destroy_within): the coordinator of a run across processes, where CAF's
  /// network layer may keep an ended actor referenced after a host left.
  bounded,
  /// Never destroyed: the system is released and the process ends (std::_Exit)
  /// soon after. A worker of a run across processes: a learner of it may wait
  /// forever on a coordinator that is gone, and ~actor_system would wait for
  /// that learner's thread.
  leave,
};

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
/// after a worker left (system_end::bounded).
bool destroy_within(std::unique_ptr<caf::actor_system> sys,
                    std::unique_ptr<caf::actor_system_config> cfg,
                    std::chrono::milliseconds limit);

/// Ends `sys` and then `cfg` as `how` says (`limit`: system_end::bounded's).
/// True when the system was destroyed; false when it was left running
/// (system_end::leave, or a bounded wait that ran out).
bool end_system(std::unique_ptr<caf::actor_system> sys,
                std::unique_ptr<caf::actor_system_config> cfg, system_end how,
                std::chrono::milliseconds limit);

} // namespace troupe::runtime
