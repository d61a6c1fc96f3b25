// Fresh random seeds for tests: each test CAPTUREs its seed, so that a failure
// can be replayed with the same inputs.
#pragma once

#include <cstdint>
#include <random>

namespace troupe::test {

/// A fresh 64-bit random seed (two draws of std::random_device).
inline uint64_t fresh_seed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

} // namespace troupe::test
