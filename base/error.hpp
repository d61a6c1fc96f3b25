// The fmt-based make_error and the TROUPE_CHECK invariant check, over the
// public error values of include/troupe/error.hpp (docs/architecture.md,
// "Errors").
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>

#include <troupe/error.hpp>

namespace troupe {

/// Builds an error with a fmt-formatted message.
template <class... Ts>
error make_error(errc code, fmt::format_string<Ts...> fmt_str, Ts&&... xs) {
  return error{code, fmt::format(fmt_str, std::forward<Ts>(xs)...)};
}

namespace detail {
[[noreturn]] void check_failed(const char* cond, const char* file, int line,
                               const std::string& msg) noexcept;
} // namespace detail

} // namespace troupe

/// Aborts with the condition, file:line and a formatted message when an
/// internal invariant (never user input) does not hold; `cond` must be a
/// `bool`, so a status or result is checked with its `ok()`.
#define TROUPE_CHECK(cond, ...)                                                          \
  do {                                                                                   \
    static_assert(std::is_same_v<decltype(cond), bool>,                                  \
                  "TROUPE_CHECK takes a bool expression");                               \
    if (!(cond))                                                                         \
      ::troupe::detail::check_failed(#cond, __FILE__, __LINE__,                          \
                                     ::fmt::format(__VA_ARGS__));                        \
  } while (false)
