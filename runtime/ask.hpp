// A request from a blocking actor answered in place: the answer of type T, or
// the error (a dead receiver, a timeout) as an error value. Used by the
// runtime's own code on its threads; never inside an actor's handler.
#pragma once

#include <chrono>
#include <utility>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "base/error.hpp"

namespace troupe::runtime {

/// Sends `xs` to `dest` and waits for the answer, at most `timeout`.
template <class T, class Timeout, class... Ts>
result<T> ask_for(caf::scoped_actor& self, const caf::actor& dest, const Timeout& timeout,
                  Ts&&... xs) {
  result<T> out = make_error(errc::unavailable, "no answer");
  self->request(dest, timeout, std::forward<Ts>(xs)...)
    .receive([&](T& x) { out = std::move(x); },
             [&](caf::error& e) {
               out = make_error(errc::unavailable, "{}",
                                actors::error_message(self->system(), e));
             });
  return out;
}

/// Sends `xs` to `dest` and waits for the answer as long as it takes.
template <class T, class... Ts>
result<T> ask(caf::scoped_actor& self, const caf::actor& dest, Ts&&... xs) {
  return ask_for<T>(self, dest, caf::infinite, std::forward<Ts>(xs)...);
}

} // namespace troupe::runtime
