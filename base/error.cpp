#include "base/error.hpp"

namespace troupe {

const char* to_string(errc code) noexcept {
  switch (code) {
  case errc::none:
    return "none";
  case errc::invalid_argument:
    return "invalid_argument";
  case errc::bad_config:
    return "bad_config";
  case errc::bad_input:
    return "bad_input";
  case errc::non_finite:
    return "non_finite";
  case errc::dimension_mismatch:
    return "dimension_mismatch";
  case errc::not_found:
    return "not_found";
  case errc::io_error:
    return "io_error";
  case errc::corrupt_file:
    return "corrupt_file";
  case errc::unsupported_version:
    return "unsupported_version";
  case errc::device_error:
    return "device_error";
  case errc::unavailable:
    return "unavailable";
  }
  return "unknown";
}

namespace detail {

void check_failed(const char* cond, const char* file, int line,
                  const std::string& msg) noexcept {
  std::fprintf(stderr, "%s:%d: check failed: %s: %s\n", file, line, cond, msg.c_str());
  std::fflush(stderr);
  std::abort();
}

} // namespace detail
} // namespace troupe
