// What the runners and learners of one host of a run across processes have
// done with environment steps, counted as they do it: the host tells the
// coordinator with each answer to a weights push, so that the coordinator
// can count what a lost host took with it (docs/cluster.md, env_steps_lost).
#pragma once

#include <atomic>
#include <cstdint>

namespace troupe::actors {

/// Counters shared by every runner and learner of one host.
struct host_counters {
  /// Environment steps its runners took (every step of every environment,
  /// counted as it is taken, so a batch under way counts too).
  std::atomic<uint64_t> collected{0};
  /// Environment steps that left the host's hands: batches its learners
  /// learned or skipped, and batches its guest runners sent to learners of
  /// another host.
  std::atomic<uint64_t> finished{0};
};

} // namespace troupe::actors
