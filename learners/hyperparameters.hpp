// Typed hyperparameters: each algorithm's settings struct declares its fields
// once, and the schema, `troupe config describe` and validation all come
// from that declaration (docs/training.md, "Adding an algorithm").
#pragma once

#include <any>
#include <cmath>
#include <cstddef>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "base/error.hpp"

namespace troupe::learners {

/// The type of a hyperparameter (a config value of [algo.<name>]).
enum class hyperparameter_type { boolean, integer, floating };

/// One hyperparameter as the config schema and `troupe config describe` show it.
struct hyperparameter {
  const char* key = "";                                     ///< key inside [algo.<name>]
  hyperparameter_type type = hyperparameter_type::floating; ///< its type
  double default_value = 0;     ///< the settings struct's default (booleans 0 or 1)
  double min = 0;               ///< smallest allowed value
  double max = 0;               ///< largest allowed value
  bool min_exclusive = false;   ///< min itself is not allowed
  bool max_exclusive = false;   ///< max itself is not allowed
  const char* description = ""; ///< one line
};

/// Whether `x` is finite, within h's range and, for integers and booleans, whole.
bool in_range(const hyperparameter& h, double x) noexcept;

/// "[0, 1]", "(0, 1]": h's range as errors write it.
std::string range_text(const hyperparameter& h);

/// One field of the settings struct S, declared once with its key, its place
/// in S (whose type gives the hyperparameter's), its range and its meaning.
template <class S>
struct field {
  const char* key; ///< key in [algo.<name>]
  std::variant<bool& (*)(S&), size_t& (*)(S&), double& (*)(S&)> at; ///< the field in S
  double min;                                                       ///< smallest allowed
  double max;                                                       ///< largest allowed
  bool min_exclusive;                                               ///< min not allowed
  bool max_exclusive;                                               ///< max not allowed
  const char* description;                                          ///< one line
};

/// The value of `f` in `s`, as a double (booleans 0 or 1).
template <class S>
double field_value(const field<S>& f, const S& s) {
  S& m = const_cast<S&>(s); // the accessors return mutable references; nothing is written
  return std::visit([&](auto at) { return static_cast<double>(at(m)); }, f.at);
}

/// Sets `f` in `s` to `x` (checked by in_range before: whole for integers).
template <class S>
void set_field(const field<S>& f, S& s, double x) {
  std::visit(
    [&](auto at) {
      auto& ref = at(s);
      using T = std::decay_t<decltype(ref)>;
      if constexpr (std::is_same_v<T, bool>)
        ref = x != 0;
      else
        ref = static_cast<T>(x);
    },
    f.at);
}

/// The schema's view of `f`: its type from the field's, its default from S{}.
template <class S>
hyperparameter describe_field(const field<S>& f) {
  hyperparameter h;
  h.key = f.key;
  h.type = std::visit(
    [](auto at) {
      using T = std::decay_t<decltype(at(std::declval<S&>()))>;
      if constexpr (std::is_same_v<T, bool>)
        return hyperparameter_type::boolean;
      else if constexpr (std::is_same_v<T, size_t>)
        return hyperparameter_type::integer;
      else
        return hyperparameter_type::floating;
    },
    f.at);
  h.default_value = field_value(f, S{});
  h.min = f.min;
  h.max = f.max;
  h.min_exclusive = f.min_exclusive;
  h.max_exclusive = f.max_exclusive;
  h.description = f.description;
  return h;
}

/// Reads one hyperparameter's value (a config's, a test's) as the declaration describes
/// it.
using hyperparameter_reader = std::function<double(const hyperparameter&)>;

/// S{} with every field of `fields` set to what `read` gives, or
/// errc::invalid_argument naming `algorithm`, the key, the value and the range.
template <class S>
result<S> read_settings(const char* algorithm, const std::vector<field<S>>& fields,
                        const hyperparameter_reader& read) {
  S s{};
  for (const auto& f : fields) {
    const hyperparameter h = describe_field(f);
    const double x = read(h);
    if (!in_range(h, x))
      return make_error(errc::invalid_argument, "{}: {} = {} is outside {}", algorithm,
                        h.key, x, range_text(h));
    set_field(f, s, x);
  }
  return s;
}

/// Checks every field of `s` against its range, the error naming `algorithm`,
/// the key, the value and the range.
template <class S>
status check_settings(const char* algorithm, const std::vector<field<S>>& fields,
                      const S& s) {
  for (const auto& f : fields) {
    const hyperparameter h = describe_field(f);
    const double x = field_value(f, s);
    if (!in_range(h, x))
      return make_error(errc::invalid_argument, "{}: {} = {} is outside {}", algorithm,
                        h.key, x, range_text(h));
  }
  return ok_status();
}

} // namespace troupe::learners
