// JSON output of the commands, through one library (nlohmann-json).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace troupe::runtime {

/// A JSON value whose objects keep their keys in the order they were set,
/// with numbers printed as the shortest decimal that reads back (null for a
/// non-finite one).
using json = nlohmann::ordered_json;

/// The same for float32 numbers (policy outputs): the shortest decimal that
/// reads back as the same float32.
using json_f32 = nlohmann::basic_json<nlohmann::ordered_map, std::vector, std::string,
                                      bool, std::int64_t, std::uint64_t, float>;

/// One line of compact JSON; bytes that are not UTF-8 (in a path, say)
/// print as U+FFFD instead of failing.
template <class Json>
std::string json_line(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

/// A measured figure rounded to `decimals` places (0: a whole number, written
/// without a fraction), or null when it is not finite (JSON has no NaN).
inline json rounded(double x, int decimals) {
  if (!std::isfinite(x))
    return nullptr;
  if (decimals == 0 && std::fabs(x) < 9.2e18)
    return static_cast<std::int64_t>(std::llround(x));
  const double scale = std::pow(10.0, decimals);
  return std::round(x * scale) / scale;
}

} // namespace troupe::runtime
