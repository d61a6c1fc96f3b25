// The embedding API's boundary: nothing throws across it. Every public
// function runs its body through guarded(), which turns an escaping
// exception into an error value naming the call.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <utility>

#include "base/error.hpp"

namespace troupe::embed {

/// The error for an exception that escaped `call`.
inline error escaped(const char* call) noexcept {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return error{errc::unavailable, std::string(call) + ": out of memory"};
  } catch (const std::exception& e) {
    return error{errc::unavailable, std::string(call) + ": internal error: " + e.what()};
  } catch (...) {
    return error{errc::unavailable,
                 std::string(call) + ": internal error (unknown exception)"};
  }
}

/// Runs `body` (returning result<T>), turning an exception into an error.
template <class T, class F>
result<T> guarded(const char* call, F&& body) noexcept {
  try {
    return std::forward<F>(body)();
  } catch (...) {
    return escaped(call);
  }
}

/// Runs `body` (returning status), turning an exception into an error.
template <class F>
status guarded_status(const char* call, F&& body) noexcept {
  try {
    return std::forward<F>(body)();
  } catch (...) {
    return escaped(call);
  }
}

} // namespace troupe::embed
