#include <doctest/doctest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "learners/stats_view.hpp"

using troupe::learners::stats_snapshot;
using troupe::learners::stats_view;

TEST_CASE("a new view reads as the identity normalization at version 0") {
  stats_view view(3, "obs");
  const auto& s = view.read();
  CHECK(s.version == 0);
  CHECK(s.stream == "obs");
  CHECK(s.mean == std::vector<double>{0, 0, 0});
  CHECK(s.var == std::vector<double>{1, 1, 1});
}

TEST_CASE("a view returns the latest published snapshot and ignores older versions") {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(-5, 5);
  stats_view view(2);
  stats_snapshot a{"obs", 3, 30, {u(rng), u(rng)}, {1 + u(rng) * u(rng), 2.0}};
  stats_snapshot b{"obs", 7, 70, {u(rng), u(rng)}, {3.0, 4.0}};
  REQUIRE(view.publish(a).ok());
  CHECK(view.read().mean == a.mean);
  REQUIRE(view.publish(b).ok());
  REQUIRE(view.publish(a).ok()); // older: ignored, not an error
  const auto& s = view.read();
  CHECK(s.version == 7);
  CHECK(s.mean == b.mean);
  CHECK(s.var == b.var);
  CHECK(view.published_version() == 7);
  // Reading again without a new publication returns the same snapshot.
  CHECK(&view.read() == &s);
}

TEST_CASE("a reader never sees a torn snapshot while a writer publishes concurrently") {
  const size_t dim = 32;
  stats_view view(dim);
  std::atomic<bool> done{false};
  uint64_t refused = 0; // written by the writer only, read after join
  std::thread writer([&] {
    std::vector<double> mean(dim), var(dim);
    for (uint64_t v = 1; v <= 200000; ++v) {
      std::fill(mean.begin(), mean.end(), static_cast<double>(v));
      std::fill(var.begin(), var.end(), static_cast<double>(2 * v));
      if (!view.publish(v, v * 10, mean.data(), var.data(), dim).ok())
        ++refused;
    }
    done = true;
  });
  uint64_t last = 0, torn = 0, backwards = 0, reads = 0;
  while (!done.load() || last < 200000) {
    const auto& s = view.read();
    ++reads;
    if (s.version < last)
      ++backwards;
    last = s.version;
    if (s.version == 0)
      continue;
    for (size_t j = 0; j < dim; ++j)
      if (s.mean[j] != static_cast<double>(s.version) || s.var[j] != 2.0 * s.version)
        ++torn;
    if (s.count != s.version * 10)
      ++torn;
  }
  writer.join();
  CHECK(refused == 0);
  CHECK(torn == 0);
  CHECK(backwards == 0);
  CHECK(last == 200000);
}

TEST_CASE("a view refuses a snapshot of another dimension and keeps the one it had") {
  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<double> u(-5, 5);
  const size_t dim = 3 + rng() % 5;
  stats_view view(dim, "obs");
  stats_snapshot good{"obs", 2, 20, std::vector<double>(dim), std::vector<double>(dim)};
  for (size_t j = 0; j < dim; ++j) {
    good.mean[j] = u(rng);
    good.var[j] = 1 + u(rng) * u(rng);
  }
  REQUIRE(view.publish(good).ok());

  // A snapshot with one mean too many, one with one variance too few, and raw
  // parts of a smaller dimension: each refused with the dimensions named.
  stats_snapshot longer = good;
  longer.version = 3;
  longer.mean.push_back(u(rng));
  stats_snapshot shorter = good;
  shorter.version = 4;
  shorter.var.pop_back();
  for (const auto* bad : {&longer, &shorter}) {
    auto published = view.publish(*bad);
    REQUIRE_FALSE(published.ok());
    CHECK(published.err().code == troupe::errc::dimension_mismatch);
    CHECK(published.err().message.find(std::to_string(dim)) != std::string::npos);
  }
  std::vector<double> mean(dim - 1, u(rng)), var(dim - 1, 2.0);
  auto raw = view.publish(5, 50, mean.data(), var.data(), dim - 1);
  REQUIRE_FALSE(raw.ok());
  CHECK(raw.err().code == troupe::errc::dimension_mismatch);
  CHECK(raw.err().message.find("obs") != std::string::npos);

  // Nothing of the refused snapshots reached the reader or the version.
  CHECK(view.published_version() == 2);
  const auto& s = view.read();
  CHECK(s.version == 2);
  CHECK(s.mean == good.mean);
  CHECK(s.var == good.var);
}
