// Fresh random seeds for tests: each test CAPTUREs its seed, so that a failure
// can be replayed with the same inputs: TROUPE_TEST_SEED=<the captured seed>
// makes every draw return that seed.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace troupe::test {

/// A fresh 64-bit random seed (two draws of std::random_device), or the value
/// of TROUPE_TEST_SEED when it is set (to replay a failure).
inline uint64_t fresh_seed() {
  if (const char* fixed = std::getenv("TROUPE_TEST_SEED"); fixed && *fixed)
    return std::stoull(fixed, nullptr, 0);
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

} // namespace troupe::test
