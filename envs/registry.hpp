// Environments by id: an open registry that the classic-control suite, tests
// and embedders (a game's environment, envs/callback_env.hpp) all join with
// register_env.
//
// The registry is safe to use from several threads: registering or
// unregistering takes a lock that lookups share. Lookups hand out copies (a
// registration, a spec behind a shared_ptr), so an environment made from an
// entry, or a spec found, stays valid after the entry is unregistered.
// Factories run outside the lock: a factory may itself look environments up.
//
// The built-in environments register themselves on the registry's first use
// (a function-local table, no static-initialization order to respect), before
// anything registered by a caller: `troupe env list` prints the built-ins
// first, then the others in the order they were registered.
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

  /// Makes one environment; may capture context (a game's handle). Returns
  /// null, or throws, when it cannot: make_env reports that as an error.
  std::function<std::unique_ptr<env>()> make;

  /// Makes `num_envs` environments stepped as a batch on up to `threads`
  /// threads. Optional: when empty, make_vector_env builds a generic batch
  /// of `make`'s environments (envs/instance_vector_env.hpp).
  std::function<std::unique_ptr<vector_env>(size_t num_envs, size_t threads)> make_vector;

  /// The spaces only: an environment that troupe never steps (a game that
  /// drives itself through the embedding's agent), so `make` and
  /// `make_vector` stay empty and make_env / make_vector_env refuse the id,
  /// saying so.
  bool spaces_only = false;
};

/// Whether `spec` can be registered: a non-empty id without spaces or
/// control characters, a float32 Box observation space of at least one
/// element with bounds that are not NaN and low <= high, an action space of
/// at least one element (Discrete n in [1, 2^24], or a Box with finite
/// bounds low <= high) and a time limit >= 1. errc::invalid_argument naming
/// the id, the field, the rule and the value.
status check_spec(const env_spec& spec);

/// Adds `r` after every environment registered before it. errc::invalid_argument
/// naming the id when the id is taken, the spec is invalid (check_spec), or
/// `make` is empty (set, for a spaces_only registration).
status register_env(registration r);

/// Removes the environment `id` registered by register_env; environments
/// already made from it keep working. errc::not_found when no such id is
/// registered, errc::invalid_argument for a built-in id.
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

/// A new environment `id`; errc::not_found listing the valid ids when
/// unknown; errc::invalid_argument when the factory fails or makes an
/// environment of another id or other space sizes, or `id` was registered
/// with its spaces only.
result<std::unique_ptr<env>> make_env(const std::string& id);

/// `num_envs` environments `id` stepped as a batch on up to `threads`
/// threads; errc::not_found listing the valid ids when unknown,
/// errc::invalid_argument when num_envs or threads is 0, the factory fails or
/// `id` was registered with its spaces only.
result<std::unique_ptr<vector_env>> make_vector_env(const std::string& id,
                                                    size_t num_envs, size_t threads = 1);

} // namespace troupe::envs
