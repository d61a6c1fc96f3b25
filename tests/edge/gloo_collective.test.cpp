// The data plane's Gloo group on loopback: members found through a
// rendezvous store, all-reduce sums against a float64 reference with the same
// bytes on every member, broadcast, and the errors of a member that never
// comes, a member that leaves, and bad settings.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <future>
#include <vector>

#include "edge/gloo_collective.hpp"
#include "tests/edge/gloo_groups.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::edge;
using troupe::test::connect_groups;
using troupe::test::fresh_seed;

namespace {

// Runs `op(rank)` on every member at once and returns their statuses.
std::vector<status> on_all(size_t n, const std::function<status(size_t)>& op) {
  std::vector<status> out(n);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < n; ++r)
    threads.emplace_back([&, r] { out[r] = op(r); });
  for (auto& t : threads)
    t.join();
  return out;
}

} // namespace

TEST_CASE("an all-reduce over three members gives every member the float64 sum, in the "
          "same bytes") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  memory_store store;
  const size_t n = 3;
  auto groups = connect_groups(store, n, "sum");
  for (size_t r = 0; r < n; ++r) {
    CHECK(groups[r]->rank() == r);
    CHECK(groups[r]->size() == n);
  }
  // Large enough for Gloo's ring to split it into segments, odd so that the
  // pieces are uneven.
  for (size_t count : {size_t{1}, size_t{17}, size_t{300001}}) {
    CAPTURE(count);
    std::normal_distribution<double> normal(0.0, 3.0);
    std::vector<std::vector<double>> data(n, std::vector<double>(count));
    std::vector<long double> reference(count, 0.0L);
    for (size_t r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) {
        data[r][i] = normal(gen);
        reference[i] += data[r][i];
      }
    auto results = on_all(
      n, [&](size_t r) { return groups[r]->allreduce_sum(data[r].data(), count); });
    for (size_t r = 0; r < n; ++r) {
      INFO("rank " << r << ": " << results[r].err().message);
      REQUIRE(results[r].ok());
    }
    double worst = 0;
    for (size_t i = 0; i < count; ++i)
      worst = std::max(worst, static_cast<double>(std::fabs(data[0][i] - reference[i]) /
                                                  (1.0 + std::fabs(reference[i]))));
    CHECK(worst < 1e-14);
    for (size_t r = 1; r < n; ++r)
      CHECK(std::memcmp(data[r].data(), data[0].data(), count * sizeof(double)) == 0);
  }
}

TEST_CASE("a broadcast copies the root's bytes to every member") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  memory_store store;
  const size_t n = 3, bytes = 70001;
  auto groups = connect_groups(store, n, "bcast");
  std::vector<std::vector<char>> data(n, std::vector<char>(bytes));
  for (auto& d : data)
    for (auto& c : d)
      c = static_cast<char>(gen());
  const auto root_copy = data[1];
  auto results =
    on_all(n, [&](size_t r) { return groups[r]->broadcast(data[r].data(), bytes, 1); });
  for (size_t r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << results[r].err().message);
    REQUIRE(results[r].ok());
    CHECK(data[r] == root_copy);
  }
  auto bad = groups[0]->broadcast(data[0].data(), bytes, 3);
  REQUIRE(!bad.ok());
  CHECK(bad.err().message.find("root 3 is not a member") != std::string::npos);
}

TEST_CASE("a member that never comes fails the rendezvous within its timeout, naming the "
          "group and the rank") {
  memory_store store;
  gloo_group_options o;
  o.rank = 0;
  o.size = 2;
  o.prefix = "lonely";
  o.label = "epoch 7";
  o.timeout = std::chrono::milliseconds(300);
  auto g = connect_gloo_group(store, o);
  REQUIRE(!g.ok());
  const auto& msg = g.err().message;
  CAPTURE(msg);
  CHECK(msg.find("epoch 7") != std::string::npos);
  CHECK(msg.find("rank 0 of 2") != std::string::npos);
  CHECK(msg.find("was not set within") != std::string::npos);
}

TEST_CASE("when a member leaves, the others' all-reduce fails naming the operation and "
          "the peer's address") {
  memory_store store;
  auto groups = connect_groups(store, 2, "leave", std::chrono::seconds(5));
  std::vector<double> data(1000, 1.0);
  groups[1].reset(); // closes its connections
  auto s = groups[0]->allreduce_sum(data.data(), data.size());
  REQUIRE(!s.ok());
  const auto& msg = s.err().message;
  CAPTURE(msg);
  CHECK(msg.find("gloo all-reduce of 1000 doubles") != std::string::npos);
  CHECK(msg.find("rank 0 of 2") != std::string::npos);
  CHECK(msg.find("127.0.0.1") != std::string::npos);
}

TEST_CASE("abort from another thread ends an all-reduce blocked on a silent member "
          "long before the group's timeout, and the silent member's next one fails") {
  memory_store store;
  // A minute per operation: only abort can end the wait within the bound below.
  const auto timeout = std::chrono::seconds(60);
  auto groups = connect_groups(store, 2, "silent", timeout);
  std::vector<double> data(4096, 1.0);
  auto blocked = std::async(std::launch::async, [&] {
    return groups[0]->allreduce_sum(data.data(), data.size());
  });
  // Rank 1 stays silent (as a frozen host does); rank 0's read blocks until
  // abort shuts its sockets down, whether abort comes before or during it.
  groups[0]->abort();
  const auto waited = blocked.wait_for(timeout / 4);
  REQUIRE_MESSAGE(waited == std::future_status::ready,
                  "the all-reduce was still blocked 15 s after abort");
  const auto s = blocked.get();
  REQUIRE(!s.ok());
  CAPTURE(s.err().message);
  CHECK(s.err().message.find("rank 0 of 2") != std::string::npos);
  // The silent member finds its peer gone instead of waiting out the minute.
  std::vector<double> other(4096, 2.0);
  auto late = std::async(std::launch::async, [&] {
    return groups[1]->allreduce_sum(other.data(), other.size());
  });
  REQUIRE_MESSAGE(late.wait_for(timeout / 4) == std::future_status::ready,
                  "the silent member's all-reduce was still blocked 15 s after its peer "
                  "aborted");
  CHECK(!late.get().ok());
}

TEST_CASE("a group is refused a wildcard data interface or a rank outside it") {
  memory_store store;
  gloo_group_options o;
  o.size = 2;
  o.prefix = "bad";
  o.interface_host = "0.0.0.0";
  auto wild = connect_gloo_group(store, o);
  REQUIRE(!wild.ok());
  CHECK(wild.err().message.find("must be one address, not '0.0.0.0'") !=
        std::string::npos);
  o.interface_host = "127.0.0.1";
  o.rank = 2;
  auto outside = connect_gloo_group(store, o);
  REQUIRE(!outside.ok());
  CHECK(outside.err().message.find("rank 2 of 2") != std::string::npos);
}

TEST_CASE("a group of one reduces and broadcasts without a peer") {
  memory_store store;
  gloo_group_options o;
  o.prefix = "one";
  auto g = connect_gloo_group(store, o);
  REQUIRE(g.ok());
  std::vector<double> data{1.5, -2.25};
  REQUIRE(g.value()->allreduce_sum(data.data(), data.size()).ok());
  CHECK(data == std::vector<double>{1.5, -2.25});
}
