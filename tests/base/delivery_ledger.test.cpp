// The delivery ledger: at most once per channel, in order where gaps are
// refused, fenced incarnations refused, and its tables for checkpoints.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/delivery_ledger.hpp"
#include "tests/seed.hpp"

using troupe::base::delivery_key;
using troupe::base::delivery_ledger;
using troupe::base::delivery_verdict;
using troupe::base::sender_id;
using troupe::base::sequence_gaps;

namespace {

// The numbers a channel has accepted, kept as a set (independent of the
// ledger's single "last accepted" number).
using accepted_sets = std::map<delivery_key, std::set<uint64_t>>;

// In-order channels, by set arithmetic: [first, last] inside the accepted
// numbers is a duplicate; disjoint from them and leaving 1..last without a
// hole is accepted; anything else (a hole before it, a partial overlap) is a gap.
delivery_verdict in_order_reference(const std::set<uint64_t>& got, uint64_t first,
                                    uint64_t last) {
  bool all_in = true, any_in = false;
  for (uint64_t k = first; k <= last; ++k) {
    const bool in = got.count(k) > 0;
    all_in = all_in && in;
    any_in = any_in || in;
  }
  if (all_in)
    return delivery_verdict::duplicate;
  if (any_in)
    return delivery_verdict::gap;
  for (uint64_t k = 1; k < first; ++k)
    if (!got.count(k))
      return delivery_verdict::gap;
  return delivery_verdict::accepted;
}

} // namespace

TEST_CASE(
  "in-order channels accept each number once and refuse holes, as set arithmetic says") {
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  delivery_ledger ledger;
  accepted_sets reference;
  const std::vector<sender_id> senders = {
    {"a", 1 + gen() % 1000}, {"ab", 7}, {"a", 2000}};
  const std::vector<std::string> channels = {"obs", "ret", "bn.0"};
  uint64_t accepted = 0, duplicates = 0, gaps = 0;
  for (int round = 0; round < 4000; ++round) {
    const auto& sender = senders[gen() % senders.size()];
    const auto& channel = channels[gen() % channels.size()];
    auto& got = reference[{sender.first, sender.second, channel}];
    const uint64_t next = got.size() + 1;
    // Mostly near the next number: resends, the next one, ranges, holes.
    const uint64_t first =
      std::max<uint64_t>(1, next + gen() % 5 - std::min<uint64_t>(next - 1, 3));
    const uint64_t last = first + gen() % 3;
    const auto want = in_order_reference(got, first, last);
    const auto verdict =
      ledger.admit(sender, channel, first, last, sequence_gaps::refused);
    INFO("round " << round << ": [" << first << ", " << last << "] on " << channel);
    REQUIRE(verdict == want);
    if (verdict == delivery_verdict::accepted) {
      for (uint64_t k = first; k <= last; ++k)
        got.insert(k);
      ++accepted;
    }
    duplicates += verdict == delivery_verdict::duplicate;
    gaps += verdict == delivery_verdict::gap;
    REQUIRE(ledger.last_accepted(sender, channel) == got.size());
  }
  // Every kind of verdict was exercised.
  CHECK(accepted > 0);
  CHECK(duplicates > 0);
  CHECK(gaps > 0);
}

TEST_CASE(
  "channels that allow gaps accept a number only above every number accepted before") {
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  delivery_ledger ledger;
  const sender_id sender{"w", 1 + gen() % 100000};
  std::map<std::string, std::vector<uint64_t>> accepted_in_order;
  for (int round = 0; round < 2000; ++round) {
    const std::string channel = gen() % 2 ? "L0" : "L1";
    const uint64_t seq = 1 + gen() % 400;
    auto& list = accepted_in_order[channel];
    const bool above_all = list.empty() || seq > list.back();
    const auto verdict = ledger.admit(sender, channel, seq, seq, sequence_gaps::allowed);
    INFO("round " << round << ": " << seq << " on " << channel);
    REQUIRE(verdict ==
            (above_all ? delivery_verdict::accepted : delivery_verdict::duplicate));
    if (above_all)
      list.push_back(seq);
  }
  // Nothing was accepted twice: every list is strictly increasing.
  for (auto& kv : accepted_in_order)
    for (size_t k = 1; k < kv.second.size(); ++k)
      REQUIRE(kv.second[k - 1] < kv.second[k]);
}

TEST_CASE("sequence number 0 is never accepted") {
  delivery_ledger ledger;
  CHECK(ledger.admit({"w", 5}, "c", 0, 0, sequence_gaps::allowed) ==
        delivery_verdict::duplicate);
  CHECK(ledger.admit({"w", 5}, "c", 0, 0, sequence_gaps::refused) ==
        delivery_verdict::duplicate);
  CHECK(ledger.accepted().empty());
}

TEST_CASE("a fenced incarnation is refused on every channel, before any other verdict, "
          "and only it") {
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const uint64_t inc = 1 + gen() % 1000000;
  delivery_ledger ledger;
  REQUIRE(ledger.admit({"h", inc}, "obs", 1, 1, sequence_gaps::refused) ==
          delivery_verdict::accepted);
  CHECK_FALSE(ledger.is_fenced({"h", inc}));
  CHECK(ledger.fence({"h", inc}));
  CHECK_FALSE(ledger.fence({"h", inc})); // already fenced
  CHECK(ledger.is_fenced({"h", inc}));
  // A resend (would be a duplicate), the next number and a new channel: all fenced.
  CHECK(ledger.admit({"h", inc}, "obs", 1, 1, sequence_gaps::refused) ==
        delivery_verdict::fenced);
  CHECK(ledger.admit({"h", inc}, "obs", 2, 2, sequence_gaps::refused) ==
        delivery_verdict::fenced);
  CHECK(ledger.admit({"h", inc}, "new", 1, 1, sequence_gaps::allowed) ==
        delivery_verdict::fenced);
  CHECK(ledger.last_accepted({"h", inc}, "obs") == 1);
  // The same name's next life, and another name with that incarnation, go on.
  CHECK(ledger.admit({"h", inc + 1}, "obs", 1, 1, sequence_gaps::refused) ==
        delivery_verdict::accepted);
  CHECK(ledger.admit({"g", inc}, "obs", 1, 1, sequence_gaps::refused) ==
        delivery_verdict::accepted);
}

TEST_CASE(
  "channels_of lists one sender's channels only, also beside names that share a prefix") {
  delivery_ledger ledger;
  const auto admit = [&](const sender_id& s, const std::string& c, uint64_t n) {
    REQUIRE(ledger.admit(s, c, 1, n, sequence_gaps::refused) ==
            delivery_verdict::accepted);
  };
  admit({"a", 2}, "x", 3);
  admit({"a", 2}, "y", 5);
  admit({"a", 1}, "x", 7);
  admit({"a", 3}, "x", 11);
  admit({"ab", 2}, "x", 13);
  admit({"", 2}, "z", 17);
  CHECK(ledger.channels_of({"a", 2}) ==
        std::map<std::string, uint64_t>{{"x", 3}, {"y", 5}});
  CHECK(ledger.channels_of({"a", 1}) == std::map<std::string, uint64_t>{{"x", 7}});
  CHECK(ledger.channels_of({"", 2}) == std::map<std::string, uint64_t>{{"z", 17}});
  CHECK(ledger.channels_of({"a", 4}).empty());
}

TEST_CASE("a restored ledger judges exactly as the one its tables came from") {
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  delivery_ledger original;
  const auto random_sender = [&] {
    return sender_id{gen() % 2 ? "p" : "q", 1 + gen() % 3};
  };
  for (int k = 0; k < 300; ++k) {
    const uint64_t first = 1 + gen() % 20;
    original.admit(random_sender(), gen() % 2 ? "c0" : "c1", first, first + gen() % 2,
                   sequence_gaps::allowed);
  }
  original.fence(random_sender());
  delivery_ledger copy;
  copy.restore(original.accepted(), original.fenced());
  CHECK(copy.accepted() == original.accepted());
  CHECK(copy.fenced() == original.fenced());
  for (int k = 0; k < 300; ++k) {
    const auto sender = random_sender();
    const std::string channel = gen() % 2 ? "c0" : "c1";
    const uint64_t first = 1 + gen() % 30, last = first + gen() % 2;
    const auto gaps = gen() % 2 ? sequence_gaps::allowed : sequence_gaps::refused;
    REQUIRE(copy.admit(sender, channel, first, last, gaps) ==
            original.admit(sender, channel, first, last, gaps));
  }
}
