#include "envs/space.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace troupe::envs {

space space::discrete(int64_t n) {
  space s;
  s.kind = space_kind::discrete;
  s.n = n;
  return s;
}

space space::box(std::vector<float> low, std::vector<float> high) {
  TROUPE_CHECK(low.size() == high.size(), "box bounds differ in size: {} vs {}",
               low.size(), high.size());
  space s;
  s.kind = space_kind::box;
  s.low = std::move(low);
  s.high = std::move(high);
  return s;
}

space space::box(size_t size, float low, float high) {
  return box(std::vector<float>(size, low), std::vector<float>(size, high));
}

bool space::contains(const float* x) const noexcept {
  if (kind == space_kind::discrete)
    return std::isfinite(x[0]) && x[0] == std::floor(x[0]) && x[0] >= 0 &&
           x[0] < static_cast<float>(n);
  for (size_t i = 0; i < low.size(); ++i)
    if (!std::isfinite(x[i]) || x[i] < low[i] || x[i] > high[i])
      return false;
  return true;
}

status space::check_action(const float* x, bool clip_box) const {
  if (kind == space_kind::discrete) {
    if (!(std::isfinite(x[0]) && x[0] == std::floor(x[0]) && x[0] >= 0 &&
          x[0] < static_cast<float>(n)))
      return make_error(errc::invalid_argument,
                        "action {} is outside {}: expected an integer in [0, {}]", x[0],
                        describe(), n - 1);
    return {};
  }
  for (size_t i = 0; i < low.size(); ++i)
    if (!std::isfinite(x[i]))
      return make_error(errc::invalid_argument,
                        "action element {} is {}: a {} action must be finite", i, x[i],
                        describe());
  if (!clip_box)
    for (size_t i = 0; i < low.size(); ++i)
      if (x[i] < low[i] || x[i] > high[i])
        return make_error(errc::invalid_argument,
                          "action element {} is {}, outside {}: expected a value in "
                          "[{}, {}]",
                          i, x[i], describe(), low[i], high[i]);
  return {};
}

namespace {

// Python's repr of a float32 bound as Gymnasium prints it: shortest form.
std::string bound_text(float v) {
  if (std::isinf(v))
    return v > 0 ? "inf" : "-inf";
  auto s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

std::string bounds_text(const std::vector<float>& b) {
  if (std::all_of(b.begin(), b.end(), [&](float v) { return v == b[0]; }))
    return bound_text(b[0]);
  std::string out = "[";
  for (size_t i = 0; i < b.size(); ++i)
    out += (i ? " " : "") + bound_text(b[i]);
  return out + "]";
}

} // namespace

std::string space::describe() const {
  if (kind == space_kind::discrete)
    return fmt::format("Discrete({})", n);
  return fmt::format("Box({}, {}, ({},), float32)", bounds_text(low), bounds_text(high),
                     low.size());
}

} // namespace troupe::envs
