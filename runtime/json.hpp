// Small JSON output helpers shared by the commands.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace troupe::runtime {

/// "[x, y, ...]" with `digits` significant digits (17 reads every double back
/// exactly); a non-finite value is written as null, since JSON has no NaN.
inline std::string json_number_list(const std::vector<double>& xs, int digits = 17) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i) {
    out += i == 0 ? "" : ", ";
    out += std::isfinite(xs[i]) ? fmt::format("{:.{}g}", xs[i], digits) : "null";
  }
  return out + "]";
}

} // namespace troupe::runtime
