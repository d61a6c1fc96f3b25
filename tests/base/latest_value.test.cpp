// base/latest_value.hpp: the reader sees each value once published, never
// an older one after a newer one, and the newest once publishing stops; the
// values it gives up are released on the writer's side.
#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "base/latest_value.hpp"

using troupe::base::latest_value;

TEST_CASE("latest_value gives its reader the newest published value") {
  latest_value<int> v(7);
  CHECK(v.read() == 7);
  CHECK(v.read() == 7);
  v.publish(8);
  v.publish(9);
  CHECK(v.read() == 9); // the newest, not each in turn
  CHECK(v.read() == 9);
  v.publish(10);
  CHECK(v.read() == 10);
}

TEST_CASE("a reader racing a writer sees published values in order, ends on the newest, "
          "and held snapshots are released once replaced") {
  using snap = std::shared_ptr<const long>;
  latest_value<snap> v(std::make_shared<const long>(0));
  constexpr long last = 200000;
  std::weak_ptr<const long> first_published;
  std::thread writer([&] {
    for (long i = 1; i <= last; ++i) {
      auto p = std::make_shared<const long>(i);
      if (i == 1)
        first_published = p;
      v.publish(std::move(p));
    }
  });
  long seen = 0;
  bool ordered = true;
  while (seen < last) {
    const long now = *v.read();
    ordered = ordered && now >= seen;
    seen = now;
  }
  writer.join();
  CHECK(ordered);
  CHECK(*v.read() == last);
  // Three buffers hold at most three values: the first is long gone.
  CHECK(first_published.expired());
}
