// The worker pool shared by the vector env and the CPU learner backend.
#include "base/worker_pool.hpp"

#include <atomic>
#include <random>
#include <thread>

#include <doctest/doctest.h>

#include "tests/seed.hpp"

using troupe::base::worker_pool;

TEST_CASE(
  "a worker pool runs every task of every step exactly once, on distinct threads") {
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  // Workers that poll a few microseconds, and a window of 100 us (the CPU
  // learner's kind) that the steps here mostly fall inside.
  for (auto spin : {std::chrono::microseconds{0}, std::chrono::microseconds{100}}) {
    const auto spin_us = spin.count();
    CAPTURE(spin_us);
    worker_pool pool(3, spin);
    REQUIRE(pool.size() == 4);
    // More spinning threads than cores wait for the scheduler's tick: fewer steps.
    const int steps = spin.count() == 0 ? 3000 : 600;
    for (int step = 0; step < steps; ++step) {
      // Varying task counts, fewer than the threads too, and now and then a
      // slow task, so that workers are caught asleep, spinning and late.
      const size_t tasks = rng() % 5;
      const bool slow = rng() % 50 == 0;
      std::atomic<int> runs[4] = {0, 0, 0, 0};
      std::thread::id ids[4];
      pool.run(tasks, [&](size_t k) {
        runs[k].fetch_add(1);
        ids[k] = std::this_thread::get_id();
        if (slow)
          std::this_thread::sleep_for(std::chrono::microseconds(200));
      });
      CAPTURE(step);
      CAPTURE(tasks);
      for (size_t k = 0; k < 4; ++k)
        REQUIRE(runs[k].load() == (k < tasks ? 1 : 0));
      for (size_t a = 0; a < tasks; ++a)
        for (size_t b = a + 1; b < tasks; ++b)
          REQUIRE((ids[a] != ids[b]));
    }
  }
}
