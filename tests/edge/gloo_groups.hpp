// The Gloo groups of the edge tests: `n` members of one rendezvous, connected
// from threads of this process, each of which must connect.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "actors/collective.hpp"
#include "edge/gloo_collective.hpp"

namespace troupe::test {

/// Connects `n` members under `prefix`, each operation bounded by `timeout`.
inline std::vector<std::shared_ptr<actors::collective>>
connect_groups(edge::rendezvous_store& store, size_t n, const std::string& prefix,
               std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  std::vector<std::shared_ptr<actors::collective>> groups(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      edge::gloo_group_options o;
      o.rank = r;
      o.size = n;
      o.prefix = prefix;
      o.timeout = timeout;
      auto g = edge::connect_gloo_group(store, o);
      if (g.ok())
        groups[r] = std::move(g).value();
      else
        errors[r] = g.err().message;
    });
  for (auto& t : threads)
    t.join();
  for (size_t r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(groups[r].get() != nullptr);
  }
  return groups;
}

} // namespace troupe::test
