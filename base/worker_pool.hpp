// Persistent worker threads that run the tasks of one parallel step while
// the calling thread runs task 0: the one pool of the vector environments
// (envs/vector_env.cpp) and the CPU learner backend (learners/cpu_backend.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "base/mutex.hpp"

namespace troupe::base {

/// Runs task k of a step on worker k - 1 while the caller runs task 0, the
/// threads spinning briefly before they sleep (docs/design-notes.md, "kernels/").
class worker_pool {
public:
  /// A pool of `workers` threads besides the caller. An idle worker polls
  /// for the next step for `spin` before it sleeps (0: 4,000 polls, a few
  /// microseconds). A caller whose steps come tens of microseconds apart (the
  /// PPO minibatches of the CPU learner) gives a window longer than the gap,
  /// so that no step waits for a thread to wake; the price is a core kept
  /// busy for that long after the last step.
  explicit worker_pool(size_t workers,
                       std::chrono::microseconds spin = std::chrono::microseconds{0});
  /// Stops and joins the workers.
  ~worker_pool();
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;

  /// Threads that run tasks, the caller's included.
  size_t size() const noexcept { return threads_.size() + 1; }

  /// Runs fn(k) for k in [0, tasks <= size()) and returns when every call
  /// returned (not reentrant: one run at a time).
  void run(size_t tasks, const std::function<void(size_t)>& fn);

private:
  void work(size_t task);

  std::chrono::microseconds spin_;
  std::vector<std::thread> threads_;
  // Taken only around the condition variables' waits and notifications: the
  // state is atomic, or published by the release increment of generation_.
  mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<size_t> pending_{0};
  std::atomic<bool> stopping_{false};
  // Published by the release increment of generation_.
  const std::function<void(size_t)>* fn_ = nullptr;
  size_t tasks_ = 0;
};

} // namespace troupe::base
