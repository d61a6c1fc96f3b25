// No exception escapes an actor: each actor turns an exception thrown in one
// of its handlers (or in a callback it calls: a policy, a log sink, a runner
// factory) into an error value that names the actor and what was thrown,
// logs it, answers the request under way with it and ends with it, so that
// its supervisor or owner sees a failure instead of a process abort.
#pragma once

#include <exception>
#include <functional>
#include <string>

#include <caf/all.hpp>

#include "actors/log.hpp"

namespace troupe::actors {

/// What `thrown` says: its what(), or that it was not a std::exception.
std::string describe_exception(const std::exception_ptr& thrown);

/// The error an actor ends with after `thrown`: "<who> threw: <what>";
/// written to `log` as well.
caf::error exception_error(const std::string& who, const std::exception_ptr& thrown,
                           const log_sink& log);

/// What an actor does with the error before it ends (answer a request it had
/// promised to answer later).
using on_exception = std::function<void(const caf::error&)>;

/// Makes an event-based actor answer the request under way with
/// exception_error, call `also` with it (when set) and end with it when one
/// of its handlers throws.
void convert_exceptions(caf::scheduled_actor* self, std::string who, log_sink log,
                        on_exception also = {});

/// Runs a blocking actor's body; an exception escaping it ends the actor with
/// exception_error instead of CAF's bare unhandled_exception.
template <class Body>
void run_converting_exceptions(caf::blocking_actor* self, const std::string& who,
                               const log_sink& log, Body&& body) {
  try {
    body();
  } catch (...) {
    self->fail_state(exception_error(who, std::current_exception(), log));
  }
}

} // namespace troupe::actors
