#include "base/worker_pool.hpp"

#include "base/error.hpp"

namespace troupe::base {

namespace {
constexpr int spin_limit = 4000;

inline void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
} // namespace

worker_pool::worker_pool(size_t workers, std::chrono::microseconds spin) : spin_(spin) {
  threads_.reserve(workers);
  for (size_t k = 0; k < workers; ++k)
    threads_.emplace_back([this, k] { work(k + 1); });
}

worker_pool::~worker_pool() {
  {
    mutex_lock guard(mutex_);
    stopping_.store(true, std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& t : threads_)
    t.join();
}

void worker_pool::run(size_t tasks, const std::function<void(size_t)>& fn) {
  TROUPE_CHECK(tasks <= size(), "worker_pool::run: {} tasks for {} threads", tasks,
               size());
  if (tasks <= 1) {
    if (tasks == 1)
      fn(0);
    return;
  }
  fn_ = &fn;
  tasks_ = tasks;
  // Every worker acknowledges every step, those without a task too, so no
  // worker can still be in one step when the next begins.
  pending_.store(threads_.size(), std::memory_order_relaxed);
  {
    // Under the mutex, so that a worker about to sleep cannot miss it.
    mutex_lock guard(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  fn(0);
  if (spin_.count() > 0) {
    // Poll the window through without a system call (a yield costs
    // microseconds in a VM), then sleep.
    const auto deadline = std::chrono::steady_clock::now() + spin_;
    for (uint32_t polls = 1; pending_.load(std::memory_order_acquire) != 0; ++polls) {
      relax();
      if (polls % 64 == 0 && std::chrono::steady_clock::now() >= deadline)
        break;
    }
    if (pending_.load(std::memory_order_acquire) == 0)
      return;
  }
  // As the vector env's pool always did: spin, then yield (a step of tens of
  // microseconds never pays for a wake-up); a long learner step then sleeps.
  for (int spins = 0; spins < spin_limit; ++spins) {
    if (pending_.load(std::memory_order_acquire) == 0)
      return;
    if (spins > 64)
      std::this_thread::yield();
  }
  mutex_lock lock(mutex_);
  lock.wait(done_, [&] { return pending_.load(std::memory_order_acquire) == 0; });
}

void worker_pool::work(size_t task) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t now = generation_.load(std::memory_order_acquire);
    if (spin_.count() > 0) {
      // Poll until the window closes, reading the clock once per 64 polls.
      const auto deadline = std::chrono::steady_clock::now() + spin_;
      for (uint32_t polls = 1; now == seen; ++polls) {
        relax();
        now = generation_.load(std::memory_order_acquire);
        if (polls % 64 == 0 && std::chrono::steady_clock::now() >= deadline)
          break;
      }
    } else {
      for (int spins = 0; now == seen && spins < spin_limit; ++spins)
        now = generation_.load(std::memory_order_acquire);
    }
    if (now == seen) {
      mutex_lock lock(mutex_);
      lock.wait(wake_,
                [&] { return generation_.load(std::memory_order_acquire) != seen; });
      now = generation_.load(std::memory_order_acquire);
    }
    seen = now;
    if (stopping_.load(std::memory_order_acquire))
      return;
    if (task < tasks_)
      (*fn_)(task);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Under the mutex, so that a caller about to sleep cannot miss it.
      mutex_lock guard(mutex_);
      done_.notify_one();
    }
  }
}

} // namespace troupe::base
