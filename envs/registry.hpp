// Environments by id: an open, thread-safe registry that the classic-control
// suite, tests and embedders all join with register_env (threads, ordering
// and checks: docs/environments.md, "The registry").
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "envs/env.hpp"
#include "envs/vector_env.hpp"

namespace troupe::envs {

/// One registered environment: its spec and how to make it.
struct registration {
  env_spec spec; ///< id, spaces, time limit, state layout

  /// Makes one environment, possibly capturing context (a game's handle),
  /// and returns null or throws when it cannot.
  std::function<std::unique_ptr<env>()> make;

  /// Optional: makes `num_envs` environments stepped as a batch on up to
  /// `threads` threads (empty: a generic batch of `make`'s environments).
  std::function<std::unique_ptr<vector_env>(size_t num_envs, size_t threads)> make_vector;

  /// The spaces only, for an environment troupe never steps (a game that
  /// drives itself through the embedding's agent): `make` and `make_vector`
  /// stay empty.
  bool spaces_only = false;
};

/// Whether `spec` can be registered (the rules: docs/environments.md, "The
/// registry"), or errc::invalid_argument naming the id, the field, the rule
/// and the value.
status check_spec(const env_spec& spec);

/// Adds `r` after every environment registered before it, or
/// errc::invalid_argument naming the id for a taken id, an invalid spec or an
/// empty `make` (a set one, for a spaces_only registration).
status register_env(registration r);

/// Removes the environment `id` registered by register_env (environments
/// made from it keep working), or errc::not_found for an unknown id and
/// errc::invalid_argument for a built-in one.
status unregister_env(const std::string& id);

/// Every registered environment, in the order `troupe env list` prints them
/// (a copy: later registrations do not change it).
std::vector<registration> registry();

/// The ids of every registered environment, in registry() order.
std::vector<std::string> registered_ids();

/// The spec of `id` (kept alive by the pointer, even after unregister_env);
/// errc::not_found listing the valid ids when unknown.
result<std::shared_ptr<const env_spec>> find_spec(const std::string& id);

/// Whether `id` was registered with its spaces only (registration::spaces_only);
/// errc::not_found listing the valid ids when unknown.
result<bool> is_spaces_only(const std::string& id);

/// A new environment `id`, or errc::not_found listing the valid ids, or
/// errc::invalid_argument when the factory fails, makes an environment of
/// another id or other space sizes, or `id` has its spaces only.
result<std::unique_ptr<env>> make_env(const std::string& id);

/// `num_envs` environments `id` stepped as a batch on up to `threads`
/// threads, or errc::not_found listing the valid ids, or
/// errc::invalid_argument when num_envs or threads is 0, the factory fails or
/// `id` has its spaces only.
result<std::unique_ptr<vector_env>> make_vector_env(const std::string& id,
                                                    size_t num_envs, size_t threads = 1);

} // namespace troupe::envs
