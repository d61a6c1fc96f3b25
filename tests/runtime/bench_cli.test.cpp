// `troupe bench learner --json`: one row per PPO case, V-trace shape and
// acting size, each with a positive finite rate; `troupe bench stats --json`:
// view reads by kind; bad options exit 2.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "tests/cli_support.hpp"

using troupe::test::run_troupe;
using troupe::test::temp_folder;

namespace {

// Every value of `key` in a flat JSON array of objects.
std::vector<double> values_of(const std::string& json, const std::string& key) {
  std::vector<double> out;
  const std::string needle = "\"" + key + "\": ";
  for (size_t at = json.find(needle); at != std::string::npos;
       at = json.find(needle, at + 1))
    out.push_back(std::strtod(json.c_str() + at + needle.size(), nullptr));
  return out;
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1))
    ++n;
  return n;
}

} // namespace

TEST_CASE("bench learner --json rows: PPO cases, V-trace shapes and acting sizes, each "
          "with a positive rate") {
  temp_folder dir("bench-cli");
  auto r = run_troupe("bench learner --json --device cpu --seconds 0.01", dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.front() == '[');
  CHECK(count_of(r.out, "\"kind\": \"ppo\"") == 4);
  CHECK(count_of(r.out, "\"kind\": \"vtrace\"") == 2);
  CHECK(count_of(r.out, "\"kind\": \"act\"") == 2);
  CHECK(r.out.find("\"batch\": 1024, ") != std::string::npos); // 32 x 32
  CHECK(values_of(r.out, "steps") == std::vector<double>{32, 16});
  auto rates = values_of(r.out, "samples_per_s");
  REQUIRE(rates.size() == 8);
  for (double x : rates) {
    CHECK(std::isfinite(x));
    CHECK(x > 0);
  }
  auto bad = run_troupe("bench learner --device tpu", dir);
  CHECK(bad.status == 2);
  CHECK(bad.err.find("tpu") != std::string::npos);
}

TEST_CASE(
  "bench stats --json reports reads of a new snapshot apart from reads with nothing "
  "new, and the two counts add up to the reads timed") {
  temp_folder dir("bench-stats-cli");
  auto r = run_troupe("bench stats --json --deltas 1000 --repeats 1 --reads 20000", dir);
  INFO(r.err);
  REQUIRE(r.status == 0);
  INFO(r.out);
  for (const char* key : {"\"read_ns_new_snapshot\": {", "\"read_ns_nothing_new\": {",
                          "\"read_ns_new_snapshot_every_merge\": {",
                          "\"read_ns_nothing_new_every_merge\": {"})
    CHECK(count_of(r.out, key) == 1);
  // In that order: new, nothing new (default publishing), then both for
  // publishing on every merge.
  auto reads = values_of(r.out, "reads");
  REQUIRE(reads.size() == 4);
  CHECK(reads[0] + reads[1] == 20000);
  CHECK(reads[2] + reads[3] == 20000);
  CHECK(reads[1] > 0);
  CHECK(reads[3] > 0);
  // A kind of read that happened has finite percentiles; p50 <= p99 <= p99.9.
  auto p50 = values_of(r.out, "p50"), p99 = values_of(r.out, "p99"),
       p999 = values_of(r.out, "p999");
  REQUIRE(p50.size() == 4);
  for (size_t k : {size_t{1}, size_t{3}}) {
    CHECK(std::isfinite(p50[k]));
    CHECK(p50[k] <= p99[k]);
    CHECK(p99[k] <= p999[k]);
  }
  auto bad = run_troupe("bench stats --reads 5", dir);
  CHECK(bad.status == 2);
  CHECK(bad.err.find("reads") != std::string::npos);
}
