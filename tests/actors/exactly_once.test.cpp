// Exactly-once statistics and gradients across unreliable links: the
// keeper's per-sender table (duplicates, order, fencing, state file), the
// delta outbox's resends through a forwarding actor that duplicates, delays,
// reorders and drops deltas, and the parameter server's at-most-once
// gradients, fencing and dynamic sync membership.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/delta_outbox.hpp"
#include "actors/messages.hpp"
#include "actors/parameter_server.hpp"
#include "actors/stats_keeper.hpp"
#include "learners/stats_streams.hpp"
#include "kernels/moments.hpp"
#include "tests/actors/ask.hpp"
#include "tests/seed.hpp"
#include "tests/temp_folder.hpp"

using namespace troupe;
using namespace troupe::actors;
using learners::delta_outcome;
using learners::stats_mode;
using learners::stats_stream;
using learners::stats_streams;
using troupe::test::ask;
using troupe::test::fresh_seed;

namespace {

struct system_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::vector<std::string> log;
  std::mutex log_mtx;
  system_fixture() {
    register_messages(cfg);
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
  log_sink sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> g(log_mtx);
      log.push_back(line);
    };
  }
};

// Rows of a random batch in float64, and its float64 two-pass moments.
struct batch {
  std::vector<double> rows; // [n x dim]
  moments_delta delta;
};

batch random_batch(std::mt19937_64& rng, const std::string& stream, size_t dim) {
  std::uniform_int_distribution<size_t> count(1, 40);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double offset = 3.0 + normal(rng), scale = 0.5 + std::abs(normal(rng));
  batch b;
  const size_t n = count(rng);
  b.rows.resize(n * dim);
  for (auto& x : b.rows)
    x = offset + scale * normal(rng);
  b.delta.stream = stream;
  b.delta.worker = "local";
  b.delta.count = n;
  b.delta.mean.assign(dim, 0.0);
  b.delta.m2.assign(dim, 0.0);
  for (size_t j = 0; j < dim; ++j) {
    double s = 0;
    for (size_t i = 0; i < n; ++i)
      s += b.rows[i * dim + j];
    const double mean = s / static_cast<double>(n);
    double m2 = 0;
    for (size_t i = 0; i < n; ++i)
      m2 += (b.rows[i * dim + j] - mean) * (b.rows[i * dim + j] - mean);
    b.delta.mean[j] = mean;
    b.delta.m2[j] = m2;
  }
  return b;
}

// The single-pass float64 moments of all rows: mean and population variance.
void reference(const std::vector<double>& rows, size_t dim, std::vector<double>& mean,
               std::vector<double>& var) {
  const size_t n = rows.size() / dim;
  mean.assign(dim, 0.0);
  var.assign(dim, 0.0);
  for (size_t j = 0; j < dim; ++j) {
    double s = 0;
    for (size_t i = 0; i < n; ++i)
      s += rows[i * dim + j];
    mean[j] = s / static_cast<double>(n);
    double m2 = 0;
    for (size_t i = 0; i < n; ++i)
      m2 += (rows[i * dim + j] - mean[j]) * (rows[i * dim + j] - mean[j]);
    var[j] = m2 / static_cast<double>(n);
  }
}

double rel_err(double got, double want) {
  return std::abs(got - want) / std::max(std::abs(want), 1e-300);
}

moments_delta sequenced(moments_delta d, const std::string& worker, uint64_t inc,
                        uint64_t first, uint64_t last) {
  d.worker = worker;
  d.incarnation = inc;
  d.seq_first = first;
  d.seq_last = last;
  return d;
}

// -- the chaos forwarder -----------------------------------------------------

// Holds every moments_delta it receives and releases them, seeded, in another
// order; drops some and duplicates some. Each is sent on as from its original
// sender (so the keeper's pushed acks reach the outbox). Requests (ack,
// fence) are delegated to the keeper unchanged.
struct chaos_state {
  std::mt19937_64 rng;
  std::vector<std::pair<caf::actor, moments_delta>> held;
  uint64_t dropped = 0, duplicated = 0;
};

caf::behavior chaos(caf::stateful_actor<chaos_state>* self, caf::actor keeper,
                    uint64_t seed) {
  self->state.rng.seed(seed);
  auto release = [self, keeper](size_t keep) {
    auto& st = self->state;
    while (st.held.size() > keep) {
      std::uniform_int_distribution<size_t> pick(0, st.held.size() - 1);
      auto i = pick(st.rng);
      auto [from, d] = std::move(st.held[i]);
      st.held.erase(st.held.begin() + static_cast<std::ptrdiff_t>(i));
      caf::send_as(from, keeper, std::move(d));
    }
  };
  return {
    [self, release](moments_delta& d) {
      auto& st = self->state;
      auto from = caf::actor_cast<caf::actor>(self->current_sender());
      std::uniform_real_distribution<double> u(0.0, 1.0);
      const double r = u(st.rng);
      if (r < 0.08) {
        st.dropped += 1;
        return;
      }
      if (r < 0.25) {
        st.duplicated += 1;
        st.held.emplace_back(from, d);
      }
      st.held.emplace_back(from, std::move(d));
      release(4); // at most 4 held: later ones overtake earlier ones
    },
    [release](flush_atom) {
      release(0);
      return flush_atom::value;
    },
    [self, keeper](ack_atom a, const std::string& w, uint64_t inc) {
      return self->delegate(keeper, a, w, inc);
    },
    [self, keeper](fence_atom a, const std::string& w, uint64_t inc) {
      return self->delegate(keeper, a, w, inc);
    },
    [self](status_atom) {
      return caf::make_message(self->state.dropped, self->state.duplicated);
    },
  };
}

std::string write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

uint64_t fnv1a64(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

template <class T>
void put(std::string& out, T x) {
  char buf[sizeof(T)];
  std::memcpy(buf, &x, sizeof(T));
  out.append(buf, sizeof(T));
}

} // namespace

// -- keeper ------------------------------------------------------------------

TEST_CASE("keeper: a sequenced delta merges once and in order, and duplicates, gaps and "
          "fenced incarnations are dropped and counted") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  stats_streams s;
  REQUIRE(s.declare({"obs", 3, "cumulative", 0.99}).ok());
  auto b1 = random_batch(rng, "obs", 3), b2 = random_batch(rng, "obs", 3),
       b3 = random_batch(rng, "obs", 3);
  delta_outcome out{};
  REQUIRE(s.merge(sequenced(b1.delta, "h1", 7, 1, 1), &out).ok());
  CHECK(out == delta_outcome::merged);
  REQUIRE(s.merge(sequenced(b1.delta, "h1", 7, 1, 1), &out).ok());
  CHECK(out == delta_outcome::duplicate);
  REQUIRE(s.merge(sequenced(b3.delta, "h1", 7, 3, 3), &out).ok());
  CHECK(out == delta_outcome::out_of_order); // 2 is missing
  // A range overlapping what is merged cannot be split: dropped.
  REQUIRE(s.merge(sequenced(b2.delta, "h1", 7, 1, 2), &out).ok());
  CHECK(out == delta_outcome::out_of_order);
  REQUIRE(s.merge(sequenced(b2.delta, "h1", 7, 2, 3), &out).ok());
  CHECK(out == delta_outcome::merged);
  // Another incarnation of the same worker has its own numbers.
  REQUIRE(s.merge(sequenced(b3.delta, "h1", 9, 1, 1), &out).ok());
  CHECK(out == delta_outcome::merged);
  s.fence({"h1", 9});
  REQUIRE(s.merge(sequenced(b3.delta, "h1", 9, 2, 2), &out).ok());
  CHECK(out == delta_outcome::fenced);
  // A bad range is a rejection with a message.
  auto bad = s.merge(sequenced(b3.delta, "h1", 7, 5, 4), &out);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.err().message.find("[5, 4]") != std::string::npos);

  auto st = *s.status_of("obs");
  CHECK(st.count == b1.delta.count + b2.delta.count + b3.delta.count);
  CHECK(st.version == 3);
  CHECK(st.duplicates == 1);
  CHECK(st.duplicates_by_worker["h1"] == 1);
  CHECK(st.out_of_order == 2);
  CHECK(st.fenced == 1);
  CHECK(st.fenced_by_worker["h1"] == 1);
  CHECK(st.rejected == 1);
  auto acks = s.acks_of({"h1", 7});
  CHECK(acks.last["obs"] == 3);
  CHECK_FALSE(acks.fenced);
  CHECK(s.acks_of({"h1", 9}).fenced);
  CHECK(s.acks_of({"h2", 7}).last.empty());

  // Unsequenced deltas (incarnation 0) merge as they come, twice if sent twice.
  REQUIRE(s.merge(b1.delta, &out).ok());
  REQUIRE(s.merge(b1.delta, &out).ok());
  CHECK(s.status_of("obs")->count == st.count + 2 * b1.delta.count);
}

TEST_CASE(
  "keeper: the state file keeps the sender table and the fenced incarnations, and "
  "a version 1 file still loads") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  test::temp_folder dir("exactly-once");
  stats_streams s;
  REQUIRE(s.declare({"obs", 2, "cumulative", 0.99}).ok());
  auto b = random_batch(rng, "obs", 2);
  REQUIRE(s.merge(sequenced(b.delta, "h1", 11, 1, 4)).ok());
  REQUIRE(s.merge(sequenced(b.delta, "h1", 11, 1, 1)).ok()); // a duplicate
  s.fence({"h2", 5});
  const auto path = (dir.path / "stats.bin").string();
  REQUIRE(s.save(path).ok());
  stats_streams again;
  REQUIRE(again.load(path).ok());
  CHECK(again.sequences() == s.sequences());
  CHECK(again.fenced() == s.fenced());
  CHECK(again.status_of("obs")->duplicates == 1);
  // A resumed keeper still drops the resend of what it merged before.
  delta_outcome out{};
  REQUIRE(again.merge(sequenced(b.delta, "h1", 11, 3, 4), &out).ok());
  CHECK(out == delta_outcome::duplicate);
  REQUIRE(again.merge(sequenced(b.delta, "h2", 5, 1, 1), &out).ok());
  CHECK(out == delta_outcome::fenced);
  REQUIRE(again.merge(sequenced(b.delta, "h1", 11, 5, 5), &out).ok());
  CHECK(out == delta_outcome::merged);

  // Version 1: one stream record without the ordering counters, no table.
  std::string payload;
  put<uint32_t>(payload, 1);
  put<uint32_t>(payload, 3);
  payload += "obs";
  put<uint32_t>(payload, 0);  // cumulative
  put<double>(payload, 0.99); // momentum
  put<uint64_t>(payload, 2);  // dim
  put<uint64_t>(payload, 1);  // version
  put<uint64_t>(payload, b.delta.count);
  for (double x : b.delta.mean)
    put<double>(payload, x);
  for (double x : b.delta.m2)
    put<double>(payload, x);
  put<uint64_t>(payload, 0); // rejected
  std::string file = "TROUPEST";
  put<uint32_t>(file, 1);
  put<uint64_t>(file, payload.size());
  file += payload;
  put<uint64_t>(file, fnv1a64(payload));
  stats_streams old;
  auto loaded = old.load(write_bytes((dir.path / "v1.bin").string(), file));
  REQUIRE_MESSAGE(loaded.ok(), (loaded ? std::string{} : loaded.err().message));
  CHECK(old.status_of("obs")->count == b.delta.count);
  CHECK(old.sequences().empty());
  // Version 3 is refused, naming the versions it reads.
  std::string v3 = file;
  uint32_t three = 3;
  std::memcpy(&v3[8], &three, sizeof(three));
  auto refused = old.load(write_bytes((dir.path / "v3.bin").string(), v3));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.err().message.find("versions 1 to 2") != std::string::npos);
}

TEST_CASE("keeper actor: pushes cumulative acks, answers ack asks, and a fence returns "
          "the final acks and drops that incarnation's later deltas") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  system_fixture fx;
  stats_keeper_options o;
  o.log = fx.sink();
  auto keeper = spawn_stats_keeper(*fx.sys, o);
  caf::scoped_actor self{*fx.sys};
  ask<uint64_t>(self, keeper, declare_atom::value, std::string("obs"), uint64_t{2});
  auto b = random_batch(rng, "obs", 2);
  self->send(keeper, sequenced(b.delta, "h", 3, 1, 1));
  auto a1 = test::receive_one<delta_ack>(self, "the ack of delta 1");
  CHECK(a1.last == 1);
  self->send(keeper, sequenced(b.delta, "h", 3, 1, 1)); // duplicate: acked again
  auto a2 = test::receive_one<delta_ack>(self, "the ack of the duplicate");
  CHECK(a2.last == 1);
  auto acks =
    ask<delta_acks>(self, keeper, ack_atom::value, std::string("h"), uint64_t{3});
  CHECK(acks.last["obs"] == 1);
  auto fenced =
    ask<delta_acks>(self, keeper, fence_atom::value, std::string("h"), uint64_t{3});
  CHECK(fenced.fenced);
  CHECK(fenced.last["obs"] == 1);
  self->send(keeper, sequenced(b.delta, "h", 3, 2, 2));
  ask<sync_atom>(self, keeper, sync_atom::value);
  auto st = ask<stream_status>(self, keeper, status_atom::value, std::string("obs"));
  CHECK(st.count == b.delta.count);
  CHECK(st.duplicates == 1);
  CHECK(st.fenced == 1);
  CHECK(st.fenced_by_worker["h"] == 1);
  std::lock_guard<std::mutex> g(fx.log_mtx);
  REQUIRE(fx.log.size() == 1);
  CHECK(fx.log[0].find("fenced worker 'h'") != std::string::npos);
}

TEST_CASE("an outbox forwards both forms of a stream declaration to its keeper and "
          "fails one naming the stream when it has no keeper") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  system_fixture fx;
  stats_keeper_options ko;
  ko.log = fx.sink();
  auto keeper = spawn_stats_keeper(*fx.sys, ko);
  caf::scoped_actor self{*fx.sys};
  delta_outbox_options oo;
  oo.worker = "h";
  oo.log = fx.sink();
  auto outbox = spawn_delta_outbox(*fx.sys, oo, keeper);
  const uint64_t dim = 1 + rng() % 7;
  CHECK(ask<uint64_t>(self, outbox, declare_atom::value, std::string("obs"), dim) == dim);
  CHECK(ask<uint64_t>(self, outbox, declare_atom::value,
                      stream_decl{"bn", dim + 1, "cumulative", 0.99}) == dim + 1);
  auto obs = ask<stream_status>(self, keeper, status_atom::value, std::string("obs"));
  CHECK(obs.dim == dim);
  auto bn = ask<stream_status>(self, keeper, status_atom::value, std::string("bn"));
  CHECK(bn.dim == dim + 1);

  auto offline = spawn_delta_outbox(*fx.sys, oo, caf::actor{});
  std::string why;
  self
    ->request(offline, std::chrono::seconds(10), declare_atom::value, std::string("obs"),
              dim)
    .receive([&](uint64_t) { why = "answered"; },
             [&](caf::error& e) { why = error_message(*fx.sys, e); });
  CHECK(why.find("no keeper to declare stream 'obs'") != std::string::npos);
  self->send_exit(offline, caf::exit_reason::user_shutdown);
  self->send_exit(outbox, caf::exit_reason::user_shutdown);
}

TEST_CASE("an outbox with an interval sends each stream's deltas merged into one per "
          "interval, and the keeper holds the float64 moments of every row") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  system_fixture fx;
  stats_keeper_options ko;
  ko.log = fx.sink();
  auto keeper = spawn_stats_keeper(*fx.sys, ko);
  caf::scoped_actor self{*fx.sys};
  const size_t dim = 1 + rng() % 5;
  const std::vector<std::string> streams{"obs", "ret"};
  for (auto& name : streams)
    ask<uint64_t>(self, keeper, declare_atom::value, name, uint64_t{dim});
  // A moving-average stream is never paced: each delta is one step of it.
  ask<uint64_t>(self, keeper, declare_atom::value, stream_decl{"bn", dim, "ema", 0.9});
  std::map<std::string, std::vector<double>> all_rows;
  auto send_some = [&](const caf::actor& outbox, size_t n) {
    for (size_t k = 0; k < n; ++k) {
      auto& name = streams[rng() % streams.size()];
      auto b = random_batch(rng, name, dim);
      all_rows[name].insert(all_rows[name].end(), b.rows.begin(), b.rows.end());
      self->send(outbox, std::move(b.delta));
    }
  };

  // An hour's interval: nothing goes out until a flush, which sends one merged
  // delta per stream (the deltas reach the outbox before the flush does).
  delta_outbox_options slow;
  slow.worker = "slow";
  slow.interval = std::chrono::hours(1);
  slow.log = fx.sink();
  auto outbox = spawn_delta_outbox(*fx.sys, slow, keeper);
  const size_t n_slow = 20 + rng() % 40;
  send_some(outbox, n_slow);
  auto before = ask<delta_outbox_status>(self, outbox, status_atom::value);
  CHECK(before.received == n_slow);
  CHECK(before.sent == 0);
  CHECK(before.held == streams.size());
  ask<delta_outbox_status>(self, outbox, flush_atom::value); // sends what is held
  auto after = ask<delta_outbox_status>(self, outbox, flush_atom::value); // its acks
  CHECK(after.sent == streams.size());
  CHECK(after.acked_deltas == n_slow);
  CHECK(after.unacked == 0);
  CHECK(ask<uint64_t>(self, outbox, declare_atom::value,
                      stream_decl{"bn", dim, "ema", 0.9}) == dim);
  const size_t n_ema = 3 + rng() % 5;
  for (size_t k = 0; k < n_ema; ++k)
    self->send(outbox, random_batch(rng, "bn", dim).delta);
  auto ema = ask<delta_outbox_status>(self, outbox, flush_atom::value);
  CHECK(ema.sent == streams.size() + n_ema); // one each, none held for the hour
  CHECK(ema.held == 0);

  // A 1 ms interval: the ticks send what came meanwhile, with no flush.
  delta_outbox_options fast = slow;
  fast.worker = "fast";
  fast.interval = std::chrono::milliseconds(1);
  auto ticking = spawn_delta_outbox(*fx.sys, fast, keeper);
  const size_t n_fast = 50 + rng() % 50;
  send_some(ticking, n_fast);
  uint64_t expected = 0;
  for (auto& [name, rows] : all_rows)
    expected += rows.size() / dim;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  uint64_t merged = 0;
  while (merged != expected && std::chrono::steady_clock::now() < deadline) {
    ask<sync_atom>(self, keeper, sync_atom::value);
    merged = 0;
    for (auto& name : streams)
      merged += ask<stream_status>(self, keeper, status_atom::value, name).count;
  }
  REQUIRE_MESSAGE(merged == expected, "the keeper merged " << merged << " of " << expected
                                                           << " rows within 30 s");
  auto ticked = ask<delta_outbox_status>(self, ticking, status_atom::value);
  CHECK(ticked.received == n_fast);
  CHECK(ticked.sent <= n_fast);
  for (auto& name : streams) {
    auto snap = ask<learners::stats_snapshot>(self, keeper, snapshot_atom::value, name);
    std::vector<double> mean, var;
    reference(all_rows[name], dim, mean, var);
    CHECK(snap.count == all_rows[name].size() / dim);
    for (size_t j = 0; j < dim; ++j) {
      CHECK(rel_err(snap.mean[j], mean[j]) <= 1e-12);
      CHECK(rel_err(snap.var[j], var[j]) <= 1e-12);
    }
  }
  self->send_exit(outbox, caf::exit_reason::user_shutdown);
  self->send_exit(ticking, caf::exit_reason::user_shutdown);
}

// -- outboxes through chaos --------------------------------------------------

TEST_CASE("outboxes through a forwarding actor that duplicates, delays, reorders and "
          "drops deltas: after reconnects the keeper holds exactly the acknowledged "
          "data (relative error <= 1e-12)") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  system_fixture fx;
  stats_keeper_options ko;
  ko.log = fx.sink();
  auto keeper = spawn_stats_keeper(*fx.sys, ko);
  caf::scoped_actor self{*fx.sys};
  const size_t dim = 3;
  const std::vector<std::string> streams{"obs", "ret"};
  for (auto& name : streams)
    ask<uint64_t>(self, keeper, declare_atom::value, name, uint64_t{dim});

  const size_t hosts = 3, rounds = 4, per_round = 30;
  std::vector<caf::actor> outboxes, chaoses;
  for (size_t h = 0; h < hosts; ++h) {
    chaoses.push_back(fx.sys->spawn(chaos, keeper, rng()));
    delta_outbox_options oo;
    oo.worker = "host" + std::to_string(h);
    oo.max_unacked = 8; // small, so that held merges happen too
    oo.log = fx.sink();
    outboxes.push_back(spawn_delta_outbox(*fx.sys, oo, chaoses.back()));
  }
  std::map<std::string, std::vector<double>> all_rows;
  std::uniform_int_distribution<size_t> pick_host(0, hosts - 1), pick_stream(0, 1);
  uint64_t total_deltas = 0;
  for (size_t r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < per_round * hosts; ++k) {
      auto& name = streams[pick_stream(rng)];
      auto b = random_batch(rng, name, dim);
      auto& rows = all_rows[name];
      rows.insert(rows.end(), b.rows.begin(), b.rows.end());
      self->send(outboxes[pick_host(rng)], std::move(b.delta));
      ++total_deltas;
    }
    // The link breaks: every outbox reconnects through a fresh chaos actor.
    // What the old one still holds arrives after the fence, and is dropped.
    for (size_t h = 0; h < hosts; ++h) {
      auto fresh = fx.sys->spawn(chaos, keeper, rng());
      ask<uint64_t>(self, outboxes[h], reconnect_atom::value, fresh);
      ask<flush_atom>(self, chaoses[h], flush_atom::value);
      caf::anon_send_exit(chaoses[h], caf::exit_reason::user_shutdown);
      chaoses[h] = fresh;
    }
    // Mid-way: the keeper's count is the sum of what it acknowledged.
    uint64_t acked = 0;
    for (auto& o : outboxes)
      acked += ask<delta_outbox_status>(self, o, flush_atom::value).acked_samples;
    ask<sync_atom>(self, keeper, sync_atom::value);
    uint64_t count = 0;
    for (auto& name : streams)
      count += ask<stream_status>(self, keeper, status_atom::value, name).count;
    // Acks sent after the flush's answer may still be on their way: acked <= count,
    // and the keeper never holds more than was sent.
    CHECK(acked <= count);
  }
  // A clean link at the end: everything is resent once and acknowledged.
  uint64_t acked_samples = 0, acked_deltas = 0;
  for (size_t h = 0; h < hosts; ++h) {
    ask<uint64_t>(self, outboxes[h], reconnect_atom::value, keeper);
    ask<flush_atom>(self, chaoses[h], flush_atom::value);
    caf::anon_send_exit(chaoses[h], caf::exit_reason::user_shutdown);
  }
  {
    // One more on the clean link, so that outbox 0's incarnation has an
    // acknowledged "obs" delta to copy below.
    auto b = random_batch(rng, "obs", dim);
    all_rows["obs"].insert(all_rows["obs"].end(), b.rows.begin(), b.rows.end());
    self->send(outboxes[0], std::move(b.delta));
    ++total_deltas;
  }
  for (auto& o : outboxes) {
    delta_outbox_status st;
    test::wait_until(
      [&] {
        st = ask<delta_outbox_status>(self, o, flush_atom::value);
        return st.unacked == 0 && st.held == 0;
      },
      "every outbox's deltas acknowledged over the clean link");
    acked_samples += st.acked_samples;
    acked_deltas += st.acked_deltas;
  }
  CHECK(acked_deltas == total_deltas);
  uint64_t count = 0, duplicates = 0, fenced = 0;
  for (auto& name : streams) {
    auto st = ask<stream_status>(self, keeper, status_atom::value, name);
    auto snap = ask<learners::stats_snapshot>(self, keeper, snapshot_atom::value, name);
    std::vector<double> mean, var;
    reference(all_rows[name], dim, mean, var);
    CHECK(snap.count == all_rows[name].size() / dim);
    for (size_t j = 0; j < dim; ++j) {
      CHECK(rel_err(snap.mean[j], mean[j]) <= 1e-12);
      CHECK(rel_err(snap.var[j], var[j]) <= 1e-12);
    }
    count += st.count;
    duplicates += st.duplicates;
    fenced += st.fenced;
    CHECK(st.rejected == 0);
  }
  CHECK(count == acked_samples);
  MESSAGE("chaos duplicates dropped: " << duplicates << ", fenced dropped: " << fenced);
  // A late copy of a delta the keeper merged is dropped and counted, never merged.
  const auto st0 = ask<delta_outbox_status>(self, outboxes[0], status_atom::value);
  auto acks0 =
    ask<delta_acks>(self, keeper, ack_atom::value, st0.worker, st0.incarnation);
  const uint64_t last0 = acks0.last["obs"];
  REQUIRE(last0 >= 1);
  auto late = random_batch(rng, "obs", dim);
  self->send(keeper, sequenced(late.delta, st0.worker, st0.incarnation, last0, last0));
  ask<sync_atom>(self, keeper, sync_atom::value);
  auto obs = ask<stream_status>(self, keeper, status_atom::value, std::string("obs"));
  CHECK(obs.count == all_rows["obs"].size() / dim);
  CHECK(obs.duplicates_by_worker[st0.worker] >= 1);
  uint64_t duplicates_after = 0;
  for (auto& name : streams)
    duplicates_after +=
      ask<stream_status>(self, keeper, status_atom::value, name).duplicates;
  CHECK(duplicates_after == duplicates + 1);
  for (auto& o : outboxes)
    caf::anon_send_exit(o, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(keeper, caf::exit_reason::user_shutdown);
}

// -- parameter server --------------------------------------------------------

namespace {

std::vector<float> random_floats(std::mt19937_64& gen, size_t n, double scale) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<float> out(n);
  for (auto& x : out)
    x = static_cast<float>(normal(gen));
  return out;
}

// One Adam step from zero state in float64 (m_hat = g, v_hat = g^2).
std::vector<double> adam_first_step(const std::vector<float>& p,
                                    const std::vector<double>& g, double lr, double eps) {
  std::vector<double> out(p.size());
  for (size_t i = 0; i < p.size(); ++i)
    out[i] = p[i] - lr * g[i] / (std::sqrt(g[i] * g[i]) + eps);
  return out;
}

gradient_update grad_of(const std::string& learner, const std::string& worker,
                        uint64_t inc, uint64_t seq, uint64_t samples,
                        std::vector<float> g) {
  gradient_update u;
  u.learner = learner;
  u.worker = worker;
  u.incarnation = inc;
  u.sequence = seq;
  u.samples = samples;
  u.learning_rate = 1e-3;
  u.grad = std::move(g);
  return u;
}

void check_params(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
}

} // namespace

TEST_CASE("parameter server: a resent gradient is not applied twice, and a fenced "
          "incarnation's gradients are refused and counted") {
  system_fixture fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 23;
  auto params = random_floats(gen, n, 1.0);
  parameter_server_options opts;
  opts.max_grad_norm = 0;
  opts.adam.eps = 1e-5;
  opts.max_staleness = 100;
  opts.log = fx.sink();
  auto server = spawn_parameter_server(*fx.sys, opts, params, {}, nullptr);
  caf::scoped_actor self{*fx.sys};
  auto g = random_floats(gen, n, 0.1);
  auto first = ask<weights_reply>(self, server, grad_of("l0", "hostA", 42, 1, 10, g));
  CHECK(first.applied);
  CHECK(first.version == 1);
  auto again = ask<weights_reply>(self, server, grad_of("l0", "hostA", 42, 1, 10, g));
  CHECK_FALSE(again.applied);
  CHECK(again.duplicate);
  CHECK(again.version == 1);
  std::vector<double> gd(g.begin(), g.end());
  check_params(again.params, adam_first_step(params, gd, 1e-3, opts.adam.eps));
  // The same sequence from another learner, or another incarnation, is new.
  auto other = ask<weights_reply>(self, server, grad_of("l0", "hostA", 43, 1, 10, g));
  CHECK(other.applied);
  CHECK(other.version == 2);

  CHECK(ask<uint64_t>(self, server, fence_atom::value, std::string("hostA"),
                      uint64_t{43}) == 0);
  auto refused = ask<weights_reply>(self, server, grad_of("l0", "hostA", 43, 2, 10, g));
  CHECK_FALSE(refused.applied);
  CHECK(refused.fenced);
  CHECK(refused.rejected);
  CHECK(refused.version == 2);
  // Incarnation 42 is not fenced: its next gradient is applied.
  CHECK(ask<weights_reply>(self, server, grad_of("l0", "hostA", 42, 2, 10, g)).applied);
  auto st = ask<parameter_server_status>(self, server, status_atom::value);
  CHECK(st.duplicates == 1);
  CHECK(st.fenced == 1);
  CHECK(st.fenced_by_worker["hostA"] == 1);
  CHECK(st.applied == 3);
  CHECK(st.version == 3);
  // A non-finite gradient stays rejected, now also counted by worker.
  auto bad = g;
  bad[3] = std::nanf("");
  auto nan = ask<weights_reply>(self, server, grad_of("l1", "hostB", 5, 1, 10, bad));
  CHECK(nan.rejected);
  CHECK_FALSE(nan.fenced);
  st = ask<parameter_server_status>(self, server, status_atom::value);
  CHECK(st.rejected_by_worker["hostB"] == 1);
  CHECK(st.rejected_by_learner["l1"] == 1);
  self->send_exit(server, caf::exit_reason::user_shutdown);
}

TEST_CASE("parameter server sync: a learner that leaves lets the waiting step complete "
          "with the rest, weighted by rows, one that joins during a step takes part from "
          "the next one, and a fence refuses a waiting gradient") {
  system_fixture fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 17;
  auto params = random_floats(gen, n, 1.0);
  parameter_server_options opts;
  opts.sync = true;
  opts.num_learners = 3;
  opts.max_grad_norm = 0;
  opts.adam.eps = 1e-5;
  opts.log = fx.sink();
  auto server = spawn_parameter_server(*fx.sys, opts, params, {}, nullptr);
  caf::scoped_actor self{*fx.sys};
  std::uniform_int_distribution<uint64_t> rows(1, 500);
  auto ga = random_floats(gen, n, 0.1), gb = random_floats(gen, n, 0.1),
       gd = random_floats(gen, n, 0.1);
  const uint64_t ra = rows(gen), rb = rows(gen), rd = rows(gen);
  self->send(server, grad_of("a", "h1", 1, 1, ra, ga));
  self->send(server, grad_of("b", "h1", 1, 1, rb, gb));
  // "d" joins while the step waits for a third learner: its gradient is held
  // for the next step.
  CHECK(ask<uint64_t>(self, server, join_atom::value, std::string("d")) == 3);
  self->send(server, grad_of("d", "h3", 3, 1, rd, gd));
  auto st = ask<parameter_server_status>(self, server, status_atom::value);
  CHECK(st.version == 0);
  CHECK(st.members == 3);
  CHECK(self->mailbox().empty());
  // The third expected learner ("c", never seen) leaves: a and b complete the
  // step, and the next one waits for a, b and d.
  CHECK(ask<uint64_t>(self, server, leave_atom::value, std::string("c")) == 3);
  std::vector<weights_reply> replies;
  for (int k = 0; k < 2; ++k)
    self->receive([&](weights_reply& w) { replies.push_back(std::move(w)); },
                  test::fail_after("the step's replies to a and b"));
  std::vector<double> mean(n);
  const double total = static_cast<double>(ra + rb);
  for (size_t i = 0; i < n; ++i)
    mean[i] = (static_cast<double>(ra) * ga[i] + static_cast<double>(rb) * gb[i]) / total;
  auto after1 = adam_first_step(params, mean, 1e-3, opts.adam.eps);
  for (auto& w : replies) {
    CHECK(w.version == 1);
    CHECK(w.applied);
    check_params(w.params, after1);
  }
  // d took no part in step 1; it is a member of step 2 and already waits in it.
  st = ask<parameter_server_status>(self, server, status_atom::value);
  CHECK(st.version == 1);
  CHECK(st.members == 3);
  CHECK(st.applied == 2);
  // b's host is lost: fencing refuses b's next gradient, which waits in step 2.
  self->send(server, grad_of("b", "h1", 1, 2, rb, gb));
  CHECK(ask<uint64_t>(self, server, fence_atom::value, std::string("h1"), uint64_t{1}) ==
        1);
  auto refused = test::receive_one<weights_reply>(self, "the fenced gradient's answer");
  CHECK(refused.fenced);
  CHECK_FALSE(refused.applied);
  CHECK(ask<uint64_t>(self, server, leave_atom::value, std::string("b")) == 2);
  CHECK(ask<uint64_t>(self, server, leave_atom::value, std::string("a")) == 1);
  // Only d remains: its held gradient completes step 2 alone.
  auto w2 = test::receive_one<weights_reply>(self, "d's reply to step 2");
  CHECK(w2.applied);
  CHECK(w2.version == 2);
  st = ask<parameter_server_status>(self, server, status_atom::value);
  CHECK(st.applied == 3);
  CHECK(st.fenced == 1);
  self->send_exit(server, caf::exit_reason::user_shutdown);
}
