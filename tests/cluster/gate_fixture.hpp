// What the in-process cluster cases share: a gate's log collected from the
// actor threads that write it, and the small policy store a gate pushes from.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/policy_store.hpp"
#include "base/mutex.hpp"
#include "base/thread_annotations.hpp"
#include "learners/model.hpp"

namespace troupe::test {

/// The lines a gate logs, collected from the threads that log them.
class gate_log {
public:
  /// A sink for gate_options::log that appends to this log; it may outlive it.
  std::function<void(const std::string&)> sink() const {
    return [s = state_](const std::string& line) {
      base::mutex_lock lock(s->mtx);
      s->lines.push_back(line);
    };
  }

  /// The lines logged so far, in order.
  std::vector<std::string> lines() const {
    base::mutex_lock lock(state_->mtx);
    return state_->lines;
  }

private:
  struct state {
    base::mutex mtx;
    std::vector<std::string> lines TROUPE_GUARDED_BY(mtx);
  };
  std::shared_ptr<state> state_ = std::make_shared<state>();
};

/// A policy store of a CartPole-sized actor-critic (4 observations, 2
/// actions, seed 1) that keeps 4 versions.
inline std::shared_ptr<actors::policy_store> cartpole_policy_store() {
  learners::model_spec spec;
  spec.obs_dim = 4;
  spec.n = 2;
  return std::make_shared<actors::policy_store>(learners::actor_critic(spec, 1), 4);
}

} // namespace troupe::test
