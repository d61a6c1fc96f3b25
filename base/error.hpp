// Project-wide error helpers and invariant checks. The error values
// themselves (errc, error, result, status) are public, in
// include/troupe/error.hpp; this header adds the fmt-based make_error and
// TROUPE_CHECK. Lives in the lowest layer so that every folder (including
// the CAF-free ones) can use it; actors/ maps it onto caf::error.
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
/// internal invariant does not hold. Never use it for user input. The
/// condition must be a `bool` expression: a status or result is checked with
/// its `ok()`, so a check can never test a temporary made on the spot.
#define TROUPE_CHECK(cond, ...)                                                \
  do {                                                                         \
    static_assert(std::is_same_v<decltype(cond), bool>,                        \
                  "TROUPE_CHECK takes a bool expression");                    \
    if (!(cond))                                                               \
      ::troupe::detail::check_failed(#cond, __FILE__, __LINE__,               \
                                     ::fmt::format(__VA_ARGS__));              \
  } while (false)
