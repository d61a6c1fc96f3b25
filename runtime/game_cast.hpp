// The game-driven cast's one piece of glue: the runner-slot factory that puts
// a game feeder in every runner slot of the learners, over one game agent
// (edge/game_agent.hpp) made by the first slot the supervisor fills (the
// agent needs the policy store and the statistics keeper, which exist only
// once the cast is built). Used by the embedding API's make_agent
// (runtime/embed/session.cpp) and by remote environments
// (runtime/remote_run.cpp): one implementation of "the game drives".
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>

#include "edge/game_agent.hpp"
#include "base/error.hpp"
#include "base/mutex.hpp"
#include "runtime/cast.hpp"

namespace troupe::runtime {

/// What the game agent of a game-driven run is made with, and, once made,
/// the agent (or why it could not be made).
struct game_agent_source {
  size_t slots = 1;                      ///< N slots the game drives
  std::string name = "agent";            ///< named in the agent's messages
  std::string env_id;                    ///< named in the batches
  size_t queue_capacity_transitions = 0; ///< 0: the agent's default queue
  bool block_when_full = false;          ///< game_agent_options::block_when_full
  /// Called once, under the lock, when the agent is made (may be empty).
  std::function<void(const std::shared_ptr<edge::game_agent>&)> on_made;

  base::mutex mutex;             ///< guards what follows
  std::condition_variable ready; ///< notified when made or failed
  /// The agent, once made.
  std::shared_ptr<edge::game_agent> held TROUPE_GUARDED_BY(mutex);
  /// Why it could not be made.
  std::string failure TROUPE_GUARDED_BY(mutex);

  /// Waits at most `timeout` for the agent: the agent, or errc::unavailable
  /// saying why there is none.
  result<std::shared_ptr<edge::game_agent>> wait(std::chrono::milliseconds timeout)
    TROUPE_EXCLUDES(mutex);

  /// The agent when made, else null (any thread).
  std::shared_ptr<edge::game_agent> agent() TROUPE_EXCLUDES(mutex);
};

/// The runner-slot factory of a game-driven run over `source`: the first slot
/// makes the agent (with the slot's segment length, seed and normalization,
/// and views of the keeper's "obs" stream when the run normalizes), every
/// slot and every restart gets a feeder over it.
runner_slot_factory game_feeder_factory(std::shared_ptr<game_agent_source> source);

} // namespace troupe::runtime
