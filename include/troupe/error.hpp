// troupe's error values: the code, the message and the result/status
// wrappers. Standard library only, so that the public API (troupe.hpp) and
// every layer of the project share them without pulling in fmt.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace troupe {

/// The one error enum of the project; the message carries place, rule and value.
enum class errc : uint8_t {
  none = 0,
  invalid_argument,    ///< a caller passed a value outside the documented range
  bad_config,          ///< a config file or override failed validation
  bad_input,           ///< a data file or wire message is malformed
  non_finite,          ///< a NaN or infinity where finite numbers are required
  dimension_mismatch,  ///< sizes of two things that must agree differ
  not_found,           ///< a named thing (stream, env id, file) does not exist
  io_error,            ///< the operating system refused a read or write
  corrupt_file,        ///< a file's checksum or structure is wrong
  unsupported_version, ///< a file or message of a format version we do not read
  device_error,        ///< CUDA or another device reported a failure
  unavailable,         ///< the feature is not built in or the peer is gone
};

/// Short stable name of an error code ("bad_config", ...).
const char* to_string(errc code) noexcept;

/// An error value: a code plus a message a user can act on.
struct error {
  errc code = errc::none;
  std::string message;

  error() = default;
  error(errc c, std::string msg) : code(c), message(std::move(msg)) {}
};

/// Either a value or an error; the CAF-free twin of caf::expected.
template <class T>
class [[nodiscard]] result {
public:
  result(T value) : storage_(std::in_place_index<0>, std::move(value)) {}
  result(error err) : storage_(std::in_place_index<1>, std::move(err)) {}

  explicit operator bool() const noexcept { return storage_.index() == 0; }
  /// True when this holds a value (the query; there is no factory of that name).
  [[nodiscard]] bool ok() const noexcept { return storage_.index() == 0; }
  [[nodiscard]] bool has_value() const noexcept { return storage_.index() == 0; }

  T& value() & { return std::get<0>(storage_); }
  const T& value() const& { return std::get<0>(storage_); }
  T&& value() && { return std::get<0>(std::move(storage_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const error& err() const { return std::get<1>(storage_); }

private:
  std::variant<T, error> storage_;
};

/// Success or an error, for operations without a value. A default-constructed
/// status is a success; `ok_status()` says so where a name reads better. The
/// query is the member `ok()`; the factory is a free function on purpose, so
/// that `s.ok()` can only ever ask `s` (a static factory of the same name made
/// `TROUPE_CHECK(s.ok(), ...)` build a fresh success and never fire).
class [[nodiscard]] status {
public:
  status() = default;
  status(error err) : err_(std::move(err)) {}
  explicit operator bool() const noexcept { return err_.code == errc::none; }
  /// True when the operation succeeded.
  [[nodiscard]] bool ok() const noexcept { return err_.code == errc::none; }
  const error& err() const { return err_; }

private:
  error err_;
};

/// A successful status.
[[nodiscard]] inline status ok_status() noexcept {
  return status{};
}

} // namespace troupe
