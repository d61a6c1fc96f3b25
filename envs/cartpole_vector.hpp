// CartPole-v1's batch kernel: model_vector_env<cartpole>'s dynamics in one
// branch-free loop over float64 arrays, equal to the scalar environment to
// float32 precision (docs/environments.md, "Vector environments").
#pragma once

#include <cstddef>
#include <memory>

#include "envs/vector_env.hpp"

namespace troupe::envs {

/// A batch of `num_envs` CartPole-v1 environments on up to `threads` threads.
std::unique_ptr<vector_env> make_cartpole_vector(size_t num_envs, size_t threads);

} // namespace troupe::envs
