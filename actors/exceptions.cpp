#include "actors/exceptions.hpp"

#include <fmt/format.h>

#include "actors/messages.hpp"

namespace troupe::actors {

std::string describe_exception(const std::exception_ptr& thrown) {
  try {
    std::rethrow_exception(thrown);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

caf::error exception_error(const std::string& who, const std::exception_ptr& thrown,
                           const log_sink& log) {
  auto e = make_error(errc::unavailable, "{} threw: {}", who, describe_exception(thrown));
  // The log sink may be what threw: the error still comes out as the value.
  try {
    write_log(log, log_level::error, e.message);
  } catch (...) {
  }
  return to_caf_error(e);
}

void convert_exceptions(caf::scheduled_actor* self, std::string who, log_sink log,
                        on_exception also) {
  self->set_exception_handler(
    [who = std::move(who), log = std::move(log),
     also = std::move(also)](caf::scheduled_actor*, std::exception_ptr& thrown) {
      auto e = exception_error(who, thrown, log);
      if (also)
        also(e);
      return e;
    });
}

} // namespace troupe::actors
