// The generator's state words: reading them, restoring them mid-stream, and
// refusing the all-zero state.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "base/rng.hpp"
#include "tests/seed.hpp"

using troupe::base::rng;

namespace {

// xoshiro256++ written from the paper, independent of base/rng.hpp.
uint64_t reference_next(std::array<uint64_t, 4>& s) {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const uint64_t result = rotl(s[0] + s[3], 23) + s[0];
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

} // namespace

TEST_CASE(
  "the state words are xoshiro256++'s: a reference generator from them draws the same") {
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  rng gen(seed);
  for (int k = 0; k < static_cast<int>(seed % 97); ++k)
    gen.next();
  auto words = gen.state();
  for (int k = 0; k < 1000; ++k)
    REQUIRE(gen.next() == reference_next(words));
  CHECK(gen.state() == words);
}

TEST_CASE("a generator restored mid-stream continues the same stream") {
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  rng original(seed);
  for (int k = 0; k < 1 + static_cast<int>(seed % 1000); ++k)
    original.next();
  const auto saved = original.state();
  std::vector<uint64_t> expected(500);
  for (auto& x : expected)
    x = original.next();
  double expected_uniform = original.uniform(-3.0, 5.0);

  rng restored(seed ^ 0x1234567ull); // another stream until restored
  REQUIRE(restored.set_state(saved));
  CHECK(restored.state() == saved);
  for (size_t k = 0; k < expected.size(); ++k) {
    CAPTURE(k);
    REQUIRE(restored.next() == expected[k]);
  }
  CHECK(restored.uniform(-3.0, 5.0) == expected_uniform);
}

TEST_CASE("the all-zero state is refused and leaves the generator unchanged") {
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  rng gen(seed);
  const auto before = gen.state();
  CHECK_FALSE(rng::valid_state({0, 0, 0, 0}));
  CHECK_FALSE(gen.set_state({0, 0, 0, 0}));
  CHECK(gen.state() == before);
  // One nonzero bit anywhere is a valid state.
  for (int word = 0; word < 4; ++word) {
    std::array<uint64_t, 4> one{0, 0, 0, 0};
    one[static_cast<size_t>(word)] = uint64_t{1} << (seed % 64);
    CAPTURE(word);
    CHECK(rng::valid_state(one));
    rng other(seed);
    CHECK(other.set_state(one));
    CHECK(other.state() == one);
  }
}
