// CartPole-v1's batch kernel: the state in structure-of-arrays float64
// buffers, the dynamics in one branch-free loop the compiler vectorizes, sine
// and cosine from envs/fast_math.hpp (pole angles beyond pi/4, reachable only
// through custom states, fall back to libm for their block), random numbers
// only at resets. Same dynamics, time limit and autoreset rule as
// model_vector_env<cartpole>; sin and cos can differ from libm's in the last
// bit, so trajectories agree with the scalar environment to float32
// precision rather than bit for bit.
#pragma once

#include <cstddef>
#include <memory>

#include "envs/vector_env.hpp"

namespace troupe::envs {

/// A batch of `num_envs` CartPole-v1 environments on up to `threads` threads.
std::unique_ptr<vector_env> make_cartpole_vector(size_t num_envs, size_t threads);

} // namespace troupe::envs
