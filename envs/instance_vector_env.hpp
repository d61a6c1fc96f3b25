// A batch of separately made `env` instances behind the vector_env interface,
// the batch make_vector_env builds for an environment registered without one
// of its own; each instance is called by one thread at a time.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "envs/env.hpp"
#include "envs/vector_env.hpp"

namespace troupe::envs {

/// `num_envs` environments made by `make` (each of `spec`'s id and space
/// sizes) stepped as a batch on up to `threads` threads. errc::invalid_argument
/// naming the id and the environment when `make` returns null, throws, or
/// makes an environment of another id or other space sizes.
result<std::unique_ptr<vector_env>>
make_instance_vector_env(const env_spec& spec,
                         const std::function<std::unique_ptr<env>()>& make,
                         size_t num_envs, size_t threads);

/// Whether `made` fits `spec` (the same id and space sizes): the check
/// make_env and make_instance_vector_env apply to what a factory makes.
status check_made_env(const env_spec& spec, const env* made);

} // namespace troupe::envs
