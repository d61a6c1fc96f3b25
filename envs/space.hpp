// Observation and action spaces as Gymnasium defines them, Box and Discrete;
// actions travel as `size()` float32 values per environment, a Discrete one
// as one float holding the index (exact up to 2^24).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace troupe::envs {

/// Which family a space belongs to.
enum class space_kind : uint8_t { box, discrete };

/// A Box or Discrete space.
struct space {
  space_kind kind = space_kind::box; ///< Box or Discrete
  int64_t n = 0;                     ///< number of actions (Discrete only)
  std::vector<float> low;            ///< per-element lower bound (Box only)
  std::vector<float> high;           ///< per-element upper bound (Box only)

  /// A Discrete space of `n` integers 0..n-1.
  static space discrete(int64_t n);

  /// A one-dimensional Box with per-element bounds (float32).
  static space box(std::vector<float> low, std::vector<float> high);

  /// A one-dimensional Box of `size` elements, all with the same bounds.
  static space box(size_t size, float low, float high);

  /// Number of float values one element of the space takes (1 for Discrete).
  size_t size() const noexcept { return kind == space_kind::discrete ? 1 : low.size(); }

  /// Whether `x` (size() values) lies in the space: finite and inside the
  /// bounds for a Box, an integer in [0, n) for a Discrete.
  bool contains(const float* x) const noexcept;

  /// Checks an action (a Discrete one an integer in [0, n), a Box one finite
  /// and, unless `clip_box` lets the environment clip it, inside the bounds),
  /// the error naming the element, the rule and the value.
  status check_action(const float* x, bool clip_box = false) const;

  /// Gymnasium-style description: "Discrete(2)", "Box(-2.0, 2.0, (1,), float32)".
  std::string describe() const;
};

/// `count` actions drawn uniformly from `s` with the standard random bit
/// generator `gen`, row-major (`s.size()` floats each): integers 0..n-1 for a
/// Discrete space, values within the (finite) bounds for a Box.
template <class Generator>
std::vector<float> random_actions(const space& s, size_t count, Generator& gen) {
  std::vector<float> actions(count * s.size());
  for (size_t i = 0; i < count; ++i)
    for (size_t j = 0; j < s.size(); ++j)
      actions[i * s.size() + j] =
        s.kind == space_kind::discrete
          ? static_cast<float>(std::uniform_int_distribution<int64_t>(0, s.n - 1)(gen))
          : std::uniform_real_distribution<float>(s.low[j], s.high[j])(gen);
  return actions;
}

} // namespace troupe::envs
