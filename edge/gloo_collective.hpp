// The hosts' data plane over Gloo's TCP transport (docs/cluster.md, "The data
// plane"): a group of processes that find each other through a rendezvous
// store and then all-reduce and broadcast without anyone in the middle.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/collective.hpp"
#include "base/error.hpp"
#include "base/mutex.hpp"

namespace troupe::edge {

/// The key-value store through which a group's members meet: each sets its
/// address under its key and reads everyone else's.
class rendezvous_store {
public:
  virtual ~rendezvous_store() = default;

  /// Sets `key` to `value` (a key is set once per group).
  virtual status set(const std::string& key, const std::vector<char>& value) = 0;

  /// The value of `key`, waiting up to `timeout` for it to be set; an error
  /// names the key and the wait.
  virtual result<std::vector<char>> get(const std::string& key,
                                        std::chrono::milliseconds timeout) = 0;
};

/// A store in this process's memory, for groups of threads (tests, and a
/// run whose members share one process).
class memory_store final : public rendezvous_store {
public:
  status set(const std::string& key, const std::vector<char>& value) override
    TROUPE_EXCLUDES(mtx_);
  result<std::vector<char>> get(const std::string& key,
                                std::chrono::milliseconds timeout) override
    TROUPE_EXCLUDES(mtx_);

private:
  base::mutex mtx_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<char>> values_ TROUPE_GUARDED_BY(mtx_);
};

/// Where and how one member joins a group.
struct gloo_group_options {
  size_t rank = 0; ///< this member, from 0
  size_t size = 1; ///< members
  /// The address the member's data port binds to and is reached at (the
  /// run's cluster.data_interface); never a wildcard.
  std::string interface_host = "127.0.0.1";
  std::string prefix; ///< the group's keys in the store (an epoch: "epoch-4"; Gloo adds
                      ///< "/" and the rank)
  std::chrono::milliseconds timeout{10000}; ///< rendezvous and each operation
  std::string label; ///< the group in messages ("epoch 4"); empty: the prefix
};

/// Joins the group: binds a data port on `interface_host`, publishes its
/// address in `store` and connects to every other member. An error names
/// the group, this rank and what Gloo said (a peer's address among it).
result<std::unique_ptr<actors::collective>>
connect_gloo_group(rendezvous_store& store, const gloo_group_options& o);

} // namespace troupe::edge
