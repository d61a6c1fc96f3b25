// Environments by Gymnasium id.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "envs/env.hpp"
#include "envs/vector_env.hpp"

namespace troupe::envs {

/// One registered environment: its spec and how to make it.
struct registration {
  const env_spec* spec;                                  ///< id, spaces, limit
  std::unique_ptr<env> (*make)();                        ///< one environment
  std::unique_ptr<vector_env> (*make_vector)(size_t num_envs, size_t threads); ///< a batch
};

/// Every registered environment, in the order `troupe env list` prints them.
const std::vector<registration>& registry();

/// Adds an environment after the built-in ones (tests and embedders register
/// their own this way). Call it before anything looks environments up: the
/// registry is not locked. errc::invalid_argument when the id is taken.
status add_registration(registration r);

/// The ids of every registered environment.
std::vector<std::string> registered_ids();

/// The spec of `id`; errc::not_found listing the valid ids when unknown.
result<const env_spec*> find_spec(const std::string& id);

/// A new environment `id`; errc::not_found listing the valid ids when unknown.
result<std::unique_ptr<env>> make_env(const std::string& id);

/// `num_envs` environments `id` stepped as a batch on up to `threads`
/// threads; errc::not_found listing the valid ids when unknown,
/// errc::invalid_argument when num_envs or threads is 0.
result<std::unique_ptr<vector_env>> make_vector_env(const std::string& id,
                                                    size_t num_envs, size_t threads = 1);

} // namespace troupe::envs
