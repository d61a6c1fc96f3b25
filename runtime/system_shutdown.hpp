// Ending an actor system: waiting for it, waiting a bounded time, or leaving
// it to the process's end (docs/architecture.md, "The run driver and its events").
#pragma once

#include <chrono>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

namespace troupe::runtime {

/// How a run's actor system ends (runtime::driver owns the choice).
enum class system_end {
  /// Destroyed on the caller's thread, however long it takes (a run in one process).
  wait,
  /// Destroyed on a thread of its own, waited for at most a limit (the
  /// coordinator of a run across processes).
  bounded,
  /// Never destroyed, the process ending with std::_Exit soon after (a worker
  /// of a run across processes).
  leave,
};

/// Destroys `sys` and then `cfg` on a thread of its own, waiting at most
/// `limit`, and says whether it ended in time; call it on the thread that
/// made the system.
bool destroy_within(std::unique_ptr<caf::actor_system> sys,
                    std::unique_ptr<caf::actor_system_config> cfg,
                    std::chrono::milliseconds limit);

/// Ends `sys` and then `cfg` as `how` says (`limit`: system_end::bounded's)
/// and says whether the system was destroyed rather than left running.
bool end_system(std::unique_ptr<caf::actor_system> sys,
                std::unique_ptr<caf::actor_system_config> cfg, system_end how,
                std::chrono::milliseconds limit);

} // namespace troupe::runtime
