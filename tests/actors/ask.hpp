// One request from a test's scoped actor, waited for: the answer, or a test
// failure that names the error.
#pragma once

#include <utility>

#include <caf/all.hpp>
#include <doctest/doctest.h>

namespace troupe::test {

/// Sends `xs` to `dest`, waits for the answer of type T and returns it; an
/// error answer fails the test with CAF's rendering of the error.
template <class T, class... Ts>
T ask(caf::scoped_actor& self, const caf::actor& dest, Ts&&... xs) {
  T out{};
  bool answered = false;
  self->request(dest, caf::infinite, std::forward<Ts>(xs)...)
    .receive(
      [&](T& x) {
        out = std::move(x);
        answered = true;
      },
      [&](caf::error& e) { FAIL("request failed: " << self->system().render(e)); });
  REQUIRE(answered);
  return out;
}

} // namespace troupe::test
