// Bounded waits for actor tests: one request from a test's scoped actor
// (ask), one message of a given type (receive_one), any receive (its
// fail_after clause), or a condition another thread makes true (wait_until). Each fails
// the test with what it expected once `wait_limit` has passed, so a regression fails
// instead of hanging.
#pragma once

#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include <caf/all.hpp>
#include <doctest/doctest.h>

namespace troupe::test {

/// How long a test waits for one reply, message or condition before it
/// fails. Every step these tests wait for takes milliseconds; the margin is
/// for a loaded 2-core machine and sanitizer builds.
constexpr std::chrono::seconds wait_limit{20};

/// Sends `xs` to `dest`, waits for the answer of type T and returns it; an
/// error answer, or none within `wait_limit`, fails the test with CAF's
/// rendering of the error (a timeout renders as request_timeout).
template <class T, class... Ts>
T ask(caf::scoped_actor& self, const caf::actor& dest, Ts&&... xs) {
  T out{};
  bool answered = false;
  self->request(dest, wait_limit, std::forward<Ts>(xs)...)
    .receive(
      [&](T& x) {
        out = std::move(x);
        answered = true;
      },
      [&](caf::error& e) {
        FAIL("request failed (waited at most " << wait_limit.count()
                                               << " s): " << self->system().render(e));
      });
  REQUIRE(answered);
  return out;
}

/// A receive's timeout clause: nothing matching within `limit` fails the
/// test naming `what` was awaited. Append it to every blocking receive.
inline auto fail_after(const char* what, std::chrono::seconds limit = wait_limit) {
  // A std::string: doctest prints a const char* in a message as an address.
  return caf::after(limit) >> [label = std::string(what), limit] {
    FAIL("waited " << limit.count() << " s for " << label << ", nothing came");
  };
}

/// Waits for the next message of type T (messages of other types stay in the
/// mailbox) and returns it; none within `limit` fails the test naming `what`.
template <class T>
T receive_one(caf::scoped_actor& self, const char* what,
              std::chrono::seconds limit = wait_limit) {
  T out{};
  self->receive([&](T& x) { out = std::move(x); }, fail_after(what, limit));
  return out;
}

/// Polls `done()` (yielding between polls) until it is true; still false
/// after `limit` fails the test naming `what`. For state another thread
/// changes without sending the test a message.
template <class Pred>
void wait_until(Pred&& done, const char* what, std::chrono::seconds limit = wait_limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline)
      FAIL("waited " << limit.count() << " s for " << std::string(what)
                     << ", it did not happen");
    std::this_thread::yield();
  }
}

} // namespace troupe::test
