// The project's random number generator, xoshiro256++ seeded through
// splitmix64, with NumPy's form of uniform draws (docs/environments.md,
// "Seeding and the random number generator").
#pragma once

#include <array>
#include <cstdint>

namespace troupe::base {

/// xoshiro256++ (Blackman and Vigna): 256 bits of state, period 2^256 - 1.
class rng {
public:
  /// A generator seeded with `seed`.
  explicit rng(uint64_t seed = 0) noexcept { seed_with(seed); }

  /// Restarts the stream from `seed`; the four state words come from
  /// splitmix64 so that nearby seeds give unrelated streams.
  void seed_with(uint64_t seed) noexcept {
    for (auto& word : s_) {
      seed += 0x9e3779b97f4a7c15ull;
      uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      word = z ^ (z >> 31);
    }
  }

  /// The next 64 random bits.
  uint64_t next() noexcept {
    uint64_t result = rotl(s_[0] + s_[3], 23) + s_[0];
    uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  /// The four state words, in order; set_state of them continues the stream
  /// from this point.
  std::array<uint64_t, 4> state() const noexcept { return {s_[0], s_[1], s_[2], s_[3]}; }

  /// Replaces the four state words, or returns false and changes nothing for
  /// the all-zero state (from which xoshiro would return zeros forever).
  [[nodiscard]] bool set_state(const std::array<uint64_t, 4>& words) noexcept {
    if (!valid_state(words))
      return false;
    for (int k = 0; k < 4; ++k)
      s_[k] = words[k];
    return true;
  }

  /// Whether `words` is a usable state (not all zero).
  static bool valid_state(const std::array<uint64_t, 4>& words) noexcept {
    return (words[0] | words[1] | words[2] | words[3]) != 0;
  }

  /// A double uniform in [0, 1) with 53 random bits.
  double unit() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  /// A double uniform in [low, high).
  double uniform(double low, double high) noexcept { return low + (high - low) * unit(); }

private:
  static uint64_t rotl(uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }

  uint64_t s_[4];
};

} // namespace troupe::base
