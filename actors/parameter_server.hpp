// The parameter server actor: owns the weights, Adam's state and a version, and
// applies the learners' gradients in async or sync mode (docs/training.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <caf/all.hpp>

#include "actors/log.hpp"
#include "actors/messages.hpp"
#include "actors/policy_store.hpp"
#include "learners/optimizer.hpp"

namespace troupe::actors {

/// Settings of a parameter server.
struct parameter_server_options {
  bool sync = false;          ///< sync mode (else async)
  uint64_t num_learners = 1;  ///< sync: gradients per step
  uint64_t max_staleness = 4; ///< async: drop gradients older than this many versions
  double max_grad_norm = 0.5; ///< clip of the (mean) gradient's global norm; <= 0: none
  learners::adam_config adam; ///< Adam settings (lr is taken from each gradient)
  log_sink log;               ///< drop log; empty: nowhere
};

/// Where a parameter server runs.
enum class server_thread {
  own,      ///< its own thread (training: never queued behind other actors)
  scheduler ///< the actor system's scheduler (tests that step message delivery)
};

/// Spawns a parameter server starting from `params` and `buffers` (version
/// 0). `store` (may be null) receives every new version.
caf::actor spawn_parameter_server(caf::actor_system& sys, parameter_server_options opts,
                                  std::vector<float> params, std::vector<float> buffers,
                                  std::shared_ptr<policy_store> store = nullptr,
                                  server_thread where = server_thread::own);

} // namespace troupe::actors
