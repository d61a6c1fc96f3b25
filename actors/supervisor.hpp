// The supervisor actor: watches the learners of a run (each of which
// restarts its own failed environment runners), stops the run on request
// (SIGINT/SIGTERM, through a flag it polls) or when every learner is done,
// and tells its owner what to do: write a checkpoint (forwarded from the
// metrics actor), and finish.
//
// Messages it handles:
//   (ckpt_atom, uint64_t updates)  from the metrics actor: forwarded to the owner
//   (done_atom)                    from the metrics actor: budget spent (no action;
//                                  the learners end by themselves)
//   (stop_atom)                    stop the run: learners stop after their batch,
//                                  the parameter server drains
//   down_msg of a learner
// It sends to the owner: (ckpt_atom, uint64_t updates) and, once every
// learner has ended, (done_atom, bool interrupted, std::string failure).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"

namespace troupe::actors {

/// Settings of a supervisor.
struct supervisor_options {
  std::vector<caf::actor> learners; ///< watched; each gets stop_atom on stop
  caf::actor server;                ///< drained (stop_atom) on stop
  caf::actor owner;                 ///< receives ckpt_atom and the final done_atom
  std::shared_ptr<std::atomic<int>>
    stop_flag;           ///< nonzero: stop (a signal number); may be null
  uint32_t poll_ms = 50; ///< how often the flag is looked at
};

/// Spawns a supervisor.
caf::actor spawn_supervisor(caf::actor_system& sys, supervisor_options opts);

} // namespace troupe::actors
