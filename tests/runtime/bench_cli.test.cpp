// `troupe bench learner --json`: one row per PPO case, V-trace shape and
// acting size, each with a positive finite rate; bad options exit 2.
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
