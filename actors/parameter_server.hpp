// The parameter server actor: owns the weights, Adam's state and a version.
//
// async mode: applies each gradient as it arrives; a gradient computed on
// weights more than max_staleness versions old is dropped whole, batch-norm
// buffers included, and counted (the reply then carries the current weights
// with applied = false).
// sync mode: waits for one gradient from each member learner (by name: a
// second gradient under a waiting name is a restarted learner's, and replaces
// its predecessor's orphan), applies their count-weighted mean (weights =
// samples) once, and answers every learner with the new version. The members
// are the first num_learners names seen, changed by leave (a waiting step
// completes with the rest) and join (takes part from the next step, never
// the one under way; a gradient from a new name during a step is held for
// the next one).
// At most once: a sequenced gradient (incarnation != 0) whose sequence is at
// or below the highest seen of its (worker, incarnation, learner) is not
// applied again (answered with the current weights, duplicate = true,
// counted); one from a fenced (worker, incarnation) is refused (rejected =
// fenced = true, counted per worker), also when it waits in a sync step.
// Both modes reject a gradient holding a NaN or an infinity (in the gradient
// or its buffers) before it reaches Adam: counted per learner in the status,
// logged with the learner's name, answered with rejected = true.
// Every new version is also published to a policy store, when one is given,
// so that environment runners act with it.
//
// Messages it handles (types in actors/messages.hpp):
//   gradient_update             -> weights_reply   (sync: once all members' arrived)
//   (leave_atom, string learner) -> uint64_t       learners the step now waits for
//   (join_atom, string learner)  -> uint64_t       the same (the joiner counts from
//                                                  the next step)
//   (fence_atom, string worker, uint64_t incarnation) -> uint64_t  waiting gradients
//                                                  refused by it
//   (weights_atom)              -> weights_reply   current weights
//   (stop_atom)                 -> (none)  drain: answer waiting and later
//                                  gradients with the current weights, unapplied
//   (status_atom)               -> parameter_server_status
//   (state_atom)                -> parameter_server_state   for checkpoints
//   (state_atom, parameter_server_state) -> uint64_t version   restores
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
