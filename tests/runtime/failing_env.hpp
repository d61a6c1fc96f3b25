// A test-only environment, registered only by the tests that need it (never
// in the troupe binary): "Failing-v0" is CartPole whose step throws once per
// process, on the failing_cartpole::fail_on_step-th environment step of all
// its instances together, so that exactly one runner fails and its
// replacement runs on.
#pragma once

#include <atomic>
#include <cstdint>
#include <stdexcept>

#include "envs/cartpole.hpp"
#include "envs/model.hpp"
#include "envs/registry.hpp"

namespace troupe::test {

struct failing_cartpole : envs::cartpole {
  /// The environment step (counted over every instance) that throws.
  static constexpr uint64_t fail_on_step = 1200;

  static std::atomic<uint64_t>& steps() {
    static std::atomic<uint64_t> count{0};
    return count;
  }

  static envs::env_spec make_spec() {
    auto spec = envs::cartpole::make_spec();
    spec.id = "Failing-v0";
    return spec;
  }

  envs::model_step step(const float* action) {
    if (++steps() == fail_on_step)
      throw std::runtime_error("Failing-v0 throws on purpose (a test environment)");
    return envs::cartpole::step(action);
  }
};

/// Registers Failing-v0 (once per process) and restarts its step count.
inline void register_failing_env() {
  static const bool registered = [] {
    auto ok = envs::register_env(envs::model_registration<failing_cartpole>());
    return ok.ok();
  }();
  (void)registered;
  failing_cartpole::steps() = 0;
}

} // namespace troupe::test
