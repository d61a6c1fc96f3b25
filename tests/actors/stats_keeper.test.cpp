#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <future>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/stats_keeper.hpp"
#include "actors/stats_relay.hpp"
#include "learners/stats_streams.hpp"
#include "kernels/moments.hpp"
#include "tests/seed.hpp"
#include "tests/actors/ask.hpp"
#include "tests/actors/stepped.hpp"

using namespace troupe;
using namespace troupe::actors;
using learners::delta_outcome;
using learners::stats_mode;
using learners::stats_stream;
using learners::stats_streams;
using troupe::test::fresh_seed;

namespace {

struct keeper_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::vector<std::string> log;
  std::mutex log_mtx;

  explicit keeper_fixture(size_t threads = 2) {
    register_messages(cfg);
    cfg.set("scheduler.max-threads", threads);
    sys = std::make_unique<caf::actor_system>(cfg);
  }

  stats_keeper_options options(uint64_t every = 1, uint64_t interval_ms = 0) {
    stats_keeper_options o;
    o.publish_every_merges = every;
    o.publish_interval_ms = interval_ms;
    o.log = [this](const std::string& line) {
      std::lock_guard<std::mutex> g(log_mtx);
      log.push_back(line);
    };
    return o;
  }
};

using test::ask;

caf::error ask_error(caf::scoped_actor& self, const caf::actor& dest, caf::message msg) {
  caf::error out;
  self->request(dest, test::wait_limit, std::move(msg))
    .receive([&](caf::message&) { FAIL("request unexpectedly succeeded"); },
             [&](caf::error& e) { out = std::move(e); });
  return out;
}

void sync(caf::scoped_actor& self, const caf::actor& keeper) {
  ask<sync_atom>(self, keeper, sync_atom::value);
}

moments_delta delta_of(const std::string& stream, const std::string& worker,
                       const kernels::moments& m) {
  return moments_delta{stream, worker, m.count, m.mean, m.m2};
}

std::vector<float> random_rows(std::mt19937_64& rng, size_t rows, size_t dim,
                               double offset, double scale) {
  std::normal_distribution<double> n(0.0, 1.0);
  std::vector<float> x(rows * dim);
  for (auto& v : x)
    v = static_cast<float>(offset + scale * n(rng));
  return x;
}

// Float64 single-pass reference of all rows.
kernels::moments reference(const std::vector<float>& x, size_t dim) {
  size_t rows = x.size() / dim;
  kernels::moments out(dim);
  out.count = rows;
  for (size_t j = 0; j < dim; ++j) {
    long double s = 0;
    for (size_t r = 0; r < rows; ++r)
      s += x[r * dim + j];
    long double m = s / rows, q = 0;
    for (size_t r = 0; r < rows; ++r)
      q += (x[r * dim + j] - m) * (x[r * dim + j] - m);
    out.mean[j] = static_cast<double>(m);
    out.m2[j] = static_cast<double>(q);
  }
  return out;
}

} // namespace

TEST_CASE("the keeper merges deltas from several workers into the exact pooled moments") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  keeper_fixture fx;
  auto keeper = spawn_stats_keeper(*fx.sys, fx.options(4, 0));
  caf::scoped_actor self{*fx.sys};
  const size_t dim = 6;
  CHECK(ask<uint64_t>(self, keeper, declare_atom::value, std::string{"obs"},
                      uint64_t{dim}) == dim);
  // Workers with different batch sizes and different means.
  std::vector<float> all;
  std::vector<moments_delta> deltas;
  for (int w = 0; w < 5; ++w) {
    std::uniform_int_distribution<size_t> rows(1, 700);
    for (int b = 0; b < 8; ++b) {
      auto x = random_rows(rng, rows(rng), dim, 10.0 * w - 20.0, 1.0 + w);
      all.insert(all.end(), x.begin(), x.end());
      deltas.push_back(delta_of("obs", fmt::format("worker-{}", w),
                                kernels::compute_moments(x.data(), x.size() / dim, dim)));
    }
  }
  std::shuffle(deltas.begin(), deltas.end(), rng);
  for (auto& d : deltas)
    self->send(keeper, d);
  sync(self, keeper);
  auto snap =
    ask<learners::stats_snapshot>(self, keeper, snapshot_atom::value, std::string{"obs"});
  auto want = reference(all, dim);
  auto var = want.variance();
  CHECK(snap.version == deltas.size());
  CHECK(snap.count == want.count);
  for (size_t j = 0; j < dim; ++j) {
    CHECK(std::fabs(snap.mean[j] - want.mean[j]) <=
          1e-12 * std::fabs(want.mean[j]) + 1e-12);
    CHECK(std::fabs(snap.var[j] - var[j]) <= 1e-12 * var[j]);
  }
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE("bad deltas are rejected, counted per worker, logged, and never change the "
          "statistics") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  keeper_fixture fx;
  auto keeper = spawn_stats_keeper(*fx.sys, fx.options());
  caf::scoped_actor self{*fx.sys};
  ask<uint64_t>(self, keeper, declare_atom::value, std::string{"obs"}, uint64_t{3});
  auto x = random_rows(rng, 50, 3, 2.0, 3.0);
  auto good = delta_of("obs", "good", kernels::compute_moments(x.data(), 50, 3));
  self->send(keeper, good);
  sync(self, keeper);
  auto before =
    ask<learners::stats_snapshot>(self, keeper, snapshot_atom::value, std::string{"obs"});

  std::vector<moments_delta> bad;
  auto nan_mean = good;
  nan_mean.worker = "nan-worker";
  nan_mean.mean[1] = std::nan("");
  bad.push_back(nan_mean);
  auto inf_m2 = good;
  inf_m2.worker = "inf-worker";
  inf_m2.m2[2] = INFINITY;
  bad.push_back(inf_m2);
  auto wrong_dim = good;
  wrong_dim.worker = "dim-worker";
  wrong_dim.mean.push_back(1.0);
  wrong_dim.m2.push_back(1.0);
  bad.push_back(wrong_dim);
  auto zero_count = good;
  zero_count.worker = "nan-worker";
  zero_count.count = 0;
  bad.push_back(zero_count);
  auto negative = good;
  negative.worker = "neg-worker";
  negative.m2[0] = -1.0;
  bad.push_back(negative);
  for (auto& d : bad)
    self->send(keeper, d);
  auto unknown = good;
  unknown.stream = "nope";
  self->send(keeper, unknown);
  sync(self, keeper);

  auto after =
    ask<learners::stats_snapshot>(self, keeper, snapshot_atom::value, std::string{"obs"});
  CHECK(after.version == before.version);
  CHECK(after.count == before.count);
  CHECK(after.mean == before.mean);
  CHECK(after.var == before.var);
  auto st = ask<stream_status>(self, keeper, status_atom::value, std::string{"obs"});
  CHECK(st.rejected == 5);
  CHECK(st.rejected_by_worker["nan-worker"] == 2);
  CHECK(st.rejected_by_worker["inf-worker"] == 1);
  CHECK(st.rejected_by_worker["dim-worker"] == 1);
  CHECK(st.rejected_by_worker["neg-worker"] == 1);
  std::lock_guard<std::mutex> g(fx.log_mtx);
  REQUIRE(fx.log.size() == 6);
  CHECK(fx.log[0].find("nan-worker") != std::string::npos);
  CHECK(fx.log[0].find("mean[1]") != std::string::npos);
  CHECK(fx.log[1].find("m2[2]") != std::string::npos);
  CHECK(fx.log[2].find("expected dimension 3") != std::string::npos);
  CHECK(fx.log[5].find("unknown stream 'nope'") != std::string::npos);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE("versions increase by one per merged delta and are published every K merges") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  keeper_fixture fx;
  const uint64_t k = 3;
  auto keeper = spawn_stats_keeper(*fx.sys, fx.options(k, 0));
  caf::scoped_actor self{*fx.sys};
  ask<uint64_t>(self, keeper, declare_atom::value, std::string{"obs"}, uint64_t{2});
  auto first = ask<learners::stats_snapshot>(self, keeper, subscribe_atom::value,
                                             std::string{"obs"});
  CHECK(first.version == 0);
  auto send_one = [&] {
    auto x = random_rows(rng, 10, 2, 0.0, 1.0);
    self->send(keeper, delta_of("obs", "w", kernels::compute_moments(x.data(), 10, 2)));
  };
  std::vector<uint64_t> seen;
  auto next_publication = [&] {
    self->receive([&](learners::stats_snapshot& s) { seen.push_back(s.version); },
                  test::fail_after("a snapshot published after k merges"));
  };
  for (uint64_t i = 0; i < k; ++i)
    send_one();
  next_publication();
  for (uint64_t i = 0; i < k - 1; ++i)
    send_one();
  sync(self, keeper); // k - 1 merges: no publication yet
  send_one();
  next_publication();
  CHECK(seen == std::vector<uint64_t>{k, 2 * k});
  auto st = ask<stream_status>(self, keeper, status_atom::value, std::string{"obs"});
  CHECK(st.version == 2 * k);
  CHECK(st.published == 2 * k);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE("an unpublished merge is published after publish_interval_ms") {
  keeper_fixture fx;
  auto keeper = spawn_stats_keeper(*fx.sys, fx.options(1000000, 5));
  caf::scoped_actor self{*fx.sys};
  ask<uint64_t>(self, keeper, declare_atom::value, std::string{"obs"}, uint64_t{1});
  ask<learners::stats_snapshot>(self, keeper, subscribe_atom::value, std::string{"obs"});
  std::vector<float> x = {1.5f, 2.5f, 4.0f};
  self->send(keeper, delta_of("obs", "w", kernels::compute_moments(x.data(), 3, 1)));
  learners::stats_snapshot got;
  self->receive([&](learners::stats_snapshot& s) { got = std::move(s); },
                test::fail_after("the snapshot published after publish_interval_ms"));
  CHECK(got.version == 1);
  CHECK(got.count == 3);
  CHECK(got.mean[0] == doctest::Approx(8.0 / 3.0).epsilon(1e-15));
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE("ema streams follow running = momentum * running + (1 - momentum) * batch") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  keeper_fixture fx;
  auto keeper = spawn_stats_keeper(*fx.sys, fx.options());
  caf::scoped_actor self{*fx.sys};
  const double momentum = 0.9;
  ask<uint64_t>(self, keeper, declare_atom::value, stream_decl{"bn", 4, "ema", momentum});
  std::vector<double> mean(4), var(4);
  for (int b = 0; b < 20; ++b) {
    auto x = random_rows(rng, 64, 4, 3.0 * b, 1.0 + b);
    auto m = kernels::compute_moments(x.data(), 64, 4);
    auto bv = m.variance();
    for (size_t j = 0; j < 4; ++j) {
      mean[j] = b == 0 ? m.mean[j] : momentum * mean[j] + (1 - momentum) * m.mean[j];
      var[j] = b == 0 ? bv[j] : momentum * var[j] + (1 - momentum) * bv[j];
    }
    self->send(keeper, delta_of("bn", "w", m));
  }
  sync(self, keeper);
  auto snap =
    ask<learners::stats_snapshot>(self, keeper, snapshot_atom::value, std::string{"bn"});
  CHECK(snap.version == 20);
  CHECK(snap.count == 20 * 64);
  for (size_t j = 0; j < 4; ++j) {
    CHECK(snap.mean[j] == doctest::Approx(mean[j]).epsilon(1e-13));
    CHECK(snap.var[j] == doctest::Approx(var[j]).epsilon(1e-13));
  }
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE("declaring a stream again with another dimension or mode is an error") {
  keeper_fixture fx;
  auto keeper = spawn_stats_keeper(*fx.sys, fx.options());
  caf::scoped_actor self{*fx.sys};
  ask<uint64_t>(self, keeper, declare_atom::value, std::string{"obs"}, uint64_t{3});
  CHECK(ask<uint64_t>(self, keeper, declare_atom::value, std::string{"obs"},
                      uint64_t{3}) == 3);
  auto e =
    ask_error(self, keeper,
              caf::make_message(declare_atom::value, std::string{"obs"}, uint64_t{4}));
  CHECK(e.category() == error_category);
  CHECK(error_message(*fx.sys, e).find("dim 3") != std::string::npos);
  e =
    ask_error(self, keeper,
              caf::make_message(declare_atom::value, stream_decl{"obs", 3, "ema", 0.9}));
  CHECK(error_message(*fx.sys, e).find("mode cumulative") != std::string::npos);
  e = ask_error(
    self, keeper,
    caf::make_message(declare_atom::value, stream_decl{"x", 0, "cumulative", 0.9}));
  CHECK(error_message(*fx.sys, e).find("at least 1") != std::string::npos);
  e = ask_error(self, keeper,
                caf::make_message(snapshot_atom::value, std::string{"missing"}));
  CHECK(error_message(*fx.sys, e).find("unknown stream 'missing'") != std::string::npos);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE(
  "a view read completes while the keeper is blocked, with the last published snapshot") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  // One scheduler thread: a blocker actor that holds it stalls the keeper
  // (and the view's feeder) without any hook in the keeper.
  keeper_fixture fx(1);
  auto keeper = spawn_stats_keeper(*fx.sys, fx.options(1, 0));
  caf::scoped_actor self{*fx.sys};
  ask<uint64_t>(self, keeper, declare_atom::value, std::string{"obs"}, uint64_t{5});
  auto x = random_rows(rng, 100, 5, 1.0, 2.0);
  auto m = kernels::compute_moments(x.data(), 100, 5);
  self->send(keeper, delta_of("obs", "w", m));
  auto view = subscribe_view(*fx.sys, keeper, "obs", 5);
  REQUIRE(view.ok());
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  fx.sys->spawn([&entered, released] {
    entered.set_value();
    released.wait();
  });
  REQUIRE_MESSAGE(entered.get_future().wait_for(std::chrono::seconds(10)) ==
                    std::future_status::ready,
                  "expected the blocker to take the scheduler thread within 10 s");
  // The keeper is now blocked; more deltas queue up behind it.
  self->send(keeper, delta_of("obs", "w", m));
  const auto& snap = (*view)->read();
  CHECK(snap.version == 1);
  CHECK(snap.count == 100);
  auto var = m.variance();
  for (size_t j = 0; j < 5; ++j) {
    CHECK(snap.mean[j] == m.mean[j]);
    CHECK(snap.var[j] == doctest::Approx(var[j]).epsilon(1e-15));
  }
  release.set_value();
  sync(self, keeper);
  CHECK(
    ask<stream_status>(self, keeper, status_atom::value, std::string{"obs"}).version ==
    2);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE("a subscribed view holds the keeper's current snapshot when it is handed out") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  keeper_fixture fx;
  // Published only on request: the view's first snapshot is the subscription's answer.
  auto keeper = spawn_stats_keeper(*fx.sys, fx.options(1u << 30, 0));
  caf::scoped_actor self{*fx.sys};
  ask<uint64_t>(self, keeper, declare_atom::value, std::string{"obs"}, uint64_t{4});
  const uint64_t deltas = 2 + rng() % 5;
  for (uint64_t i = 0; i < deltas; ++i) {
    auto x = random_rows(rng, 50, 4, 3.0, 0.5);
    self->send(keeper, delta_of("obs", "w", kernels::compute_moments(x.data(), 50, 4)));
  }
  sync(self, keeper);
  auto expected =
    ask<learners::stats_snapshot>(self, keeper, snapshot_atom::value, std::string{"obs"});
  REQUIRE(expected.version == deltas);
  auto view = subscribe_view(*fx.sys, keeper, "obs", 4);
  REQUIRE(view.ok());
  // Read at once, as an actor's first step would: never the placeholder.
  const auto& got = (*view)->read();
  CHECK(got.version == deltas);
  CHECK(got.count == 50 * deltas);
  REQUIRE(got.mean.size() == 4);
  for (size_t j = 0; j < 4; ++j) {
    CHECK(got.mean[j] == expected.mean[j]);
    CHECK(got.var[j] == expected.var[j]);
  }
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE("a subscription to an unknown stream or to a keeper that never answers fails "
          "naming the stream") {
  keeper_fixture fx;
  auto keeper = spawn_stats_keeper(*fx.sys, fx.options());
  auto view = subscribe_view(*fx.sys, keeper, "missing", 3);
  REQUIRE_FALSE(view.ok());
  CHECK(view.err().message.find("'missing'") != std::string::npos);
  // A stand-in keeper that takes the subscription and never answers it.
  auto silent = fx.sys->spawn([](caf::event_based_actor* self) -> caf::behavior {
    auto held = std::make_shared<std::vector<caf::response_promise>>();
    return {[self, held](subscribe_atom, const std::string&) {
      held->push_back(self->make_response_promise());
    }};
  });
  auto late = subscribe_view(*fx.sys, silent, "obs", 3, std::chrono::milliseconds(200));
  REQUIRE_FALSE(late.ok());
  CHECK(late.err().message.find("did not answer") != std::string::npos);
  CHECK(late.err().message.find("'obs'") != std::string::npos);
  caf::anon_send_exit(silent, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE("the keeper's state saves and loads, and a damaged file changes nothing") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  keeper_fixture fx;
  auto keeper = spawn_stats_keeper(*fx.sys, fx.options());
  caf::scoped_actor self{*fx.sys};
  ask<uint64_t>(self, keeper, declare_atom::value, std::string{"obs"}, uint64_t{3});
  ask<uint64_t>(self, keeper, declare_atom::value, stream_decl{"bn", 2, "ema", 0.8});
  for (int b = 0; b < 5; ++b) {
    auto x = random_rows(rng, 40, 3, 5.0, 2.0);
    self->send(keeper, delta_of("obs", "w", kernels::compute_moments(x.data(), 40, 3)));
    auto y = random_rows(rng, 40, 2, -1.0, 0.5);
    self->send(keeper, delta_of("bn", "w", kernels::compute_moments(y.data(), 40, 2)));
  }
  sync(self, keeper);
  auto dir = std::string{"/tmp/troupe-test-"} + std::to_string(seed);
  auto path = dir + ".stats";
  ask<caf::ok_atom>(self, keeper, save_atom::value, path);
  auto obs =
    ask<learners::stats_snapshot>(self, keeper, snapshot_atom::value, std::string{"obs"});
  auto bn =
    ask<learners::stats_snapshot>(self, keeper, snapshot_atom::value, std::string{"bn"});

  // A fresh keeper loads the same state.
  auto other = spawn_stats_keeper(*fx.sys, fx.options());
  ask<caf::ok_atom>(self, other, load_atom::value, path);
  auto obs2 =
    ask<learners::stats_snapshot>(self, other, snapshot_atom::value, std::string{"obs"});
  auto bn2 =
    ask<learners::stats_snapshot>(self, other, snapshot_atom::value, std::string{"bn"});
  CHECK(obs2.version == obs.version);
  CHECK(obs2.count == obs.count);
  CHECK(obs2.mean == obs.mean);
  CHECK(obs2.var == obs.var);
  CHECK(bn2.mean == bn.mean);
  CHECK(bn2.var == bn.var);

  // Damaged files: each is refused, and the loaded state stays as it was.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  auto write = [&](const std::string& p, const std::string& b) {
    std::ofstream(p, std::ios::binary) << b;
  };
  auto flipped = bytes;
  std::uniform_int_distribution<size_t> at(24, bytes.size() - 9);
  flipped[at(rng)] ^= 0x5a;
  write(dir + ".flipped", flipped);
  auto versioned = bytes;
  versioned[8] = 99;
  write(dir + ".version", versioned);
  write(dir + ".truncated", bytes.substr(0, bytes.size() / 2));
  write(dir + ".magic", "not a statistics file at all");
  struct damaged {
    std::string suffix, says;
  };
  for (auto& d : {damaged{".flipped", "checksum"}, damaged{".version", "version 99"},
                  damaged{".truncated", "truncated"}, damaged{".magic", "magic"},
                  damaged{".missing", "cannot open"}}) {
    CAPTURE(d.suffix);
    auto e = ask_error(self, other, caf::make_message(load_atom::value, dir + d.suffix));
    CHECK(error_message(*fx.sys, e).find(d.says) != std::string::npos);
    auto still = ask<learners::stats_snapshot>(self, other, snapshot_atom::value,
                                               std::string{"obs"});
    CHECK(still.mean == obs.mean);
    CHECK(still.version == obs.version);
  }
  for (auto s : {".stats", ".flipped", ".version", ".truncated", ".magic"})
    std::remove((dir + s).c_str());
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
  self->send_exit(other, caf::exit_reason::user_shutdown);
}

// -- message order, stepped on CAF's test coordinator ------------------------

TEST_CASE("stepped: a subscriber gets one snapshot per publish_every_merges merges, none "
          "between, and an unpublished merge only when its timer fires") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  test::stepped_system fx;
  const uint64_t k = 3;
  const auto interval = std::chrono::milliseconds(10);
  stats_keeper_options o;
  o.publish_every_merges = k;
  o.publish_interval_ms = static_cast<uint64_t>(interval.count());
  o.log = [](const std::string&) {};
  auto keeper = fx.add(spawn_stats_keeper(*fx.sys, o), "keeper");
  // What the subscriber receives, in order: version and count.
  auto seen = std::make_shared<std::vector<std::pair<uint64_t, uint64_t>>>();
  auto subscriber = fx.add(test::spawn_recorder(*fx.sys,
                                                [seen](learners::stats_snapshot& s) {
                                                  seen->emplace_back(s.version, s.count);
                                                }),
                           "subscriber");
  using seen_t = std::vector<std::pair<uint64_t, uint64_t>>;
  fx.drain(); // the actors' start
  REQUIRE(fx.queue() == "[]");
  caf::anon_send(keeper, declare_atom::value, std::string{"obs"}, uint64_t{2});
  caf::send_as(subscriber, keeper, subscribe_atom::value, std::string{"obs"});
  fx.step(keeper); // declare
  fx.step(keeper); // subscribe: the answer goes to the subscriber
  fx.step(subscriber);
  CHECK(*seen == seen_t{{0, 0}});
  CHECK(fx.queue() == "[]");
  CHECK_FALSE(fx.sched->has_pending_timeout());

  uint64_t rows_sent = 0;
  auto send_delta = [&] {
    const size_t rows = 1 + rng() % 20;
    rows_sent += rows;
    auto x = random_rows(rng, rows, 2, 0.0, 1.0);
    caf::anon_send(keeper,
                   delta_of("obs", "w", kernels::compute_moments(x.data(), rows, 2)));
  };
  // k - 1 merges: nothing is sent to the subscriber, one timer is set.
  for (uint64_t i = 0; i + 1 < k; ++i) {
    send_delta();
    fx.step(keeper);
    CHECK(fx.queue() == "[]");
  }
  CHECK(fx.sched->clock().schedule().size() == 1);
  // The k-th merge publishes at once, with all k merges in it.
  send_delta();
  fx.step(keeper);
  CHECK(fx.queue() == "[subscriber]");
  fx.step(subscriber);
  CHECK(*seen == seen_t{{0, 0}, {k, rows_sent}});
  const uint64_t rows_at_k = rows_sent;
  // The timer set by the first merge fires with nothing unpublished: nothing sent.
  CHECK(fx.sched->trigger_timeout());
  fx.step(keeper);
  CHECK(fx.queue() == "[]");
  CHECK(seen->size() == 2);
  // One more merge waits for its timer: not a moment before the interval.
  send_delta();
  fx.step(keeper);
  CHECK(fx.queue() == "[]");
  REQUIRE(fx.sched->clock().schedule().size() == 1);
  CHECK(fx.sched->advance_time(interval - std::chrono::milliseconds(1)) == 0);
  CHECK(fx.queue() == "[]");
  CHECK(fx.sched->advance_time(std::chrono::milliseconds(1)) == 1);
  fx.step(keeper); // the timer's publish
  CHECK(fx.queue() == "[subscriber]");
  fx.step(subscriber);
  CHECK(*seen == seen_t{{0, 0}, {k, rows_at_k}, {k + 1, rows_sent}});
  CHECK(fx.queue() == "[]");
}

TEST_CASE(
  "stepped: a snapshot request between merges answers the merges before it, while "
  "subscribers still wait for the coalesced publication") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  test::stepped_system fx;
  stats_keeper_options o;
  o.publish_every_merges = 4;
  o.publish_interval_ms = 0;
  o.log = [](const std::string&) {};
  auto keeper = fx.add(spawn_stats_keeper(*fx.sys, o), "keeper");
  // Each actor's log: "<who> <version>" in the order received.
  auto log = std::make_shared<std::vector<std::string>>();
  auto recorder = [&](const std::string& who) {
    return fx.add(test::spawn_recorder(*fx.sys,
                                       [log, who](learners::stats_snapshot& s) {
                                         log->push_back(who + " " +
                                                        std::to_string(s.version));
                                       }),
                  who);
  };
  auto subscriber = recorder("subscriber");
  auto asker = recorder("asker");
  fx.drain(); // the actors' start
  REQUIRE(fx.queue() == "[]");
  caf::anon_send(keeper, declare_atom::value, std::string{"obs"}, uint64_t{3});
  caf::send_as(subscriber, keeper, subscribe_atom::value, std::string{"obs"});
  fx.drain();
  CHECK(*log == std::vector<std::string>{"subscriber 0"});
  // Everything is queued before the keeper runs: two merges, a snapshot
  // request, two more merges. The keeper handles them in that order.
  auto delta = [&] {
    auto x = random_rows(rng, 5, 3, 1.0, 2.0);
    return delta_of("obs", "w", kernels::compute_moments(x.data(), 5, 3));
  };
  caf::anon_send(keeper, delta());
  caf::anon_send(keeper, delta());
  caf::send_as(asker, keeper, snapshot_atom::value, std::string{"obs"});
  caf::anon_send(keeper, delta());
  caf::anon_send(keeper, delta());
  fx.step(keeper);
  fx.step(keeper);
  CHECK(fx.queue() == "[keeper]");
  fx.step(keeper); // the snapshot request: answered with 2 merges
  CHECK(fx.queue() == "[keeper, asker]");
  fx.step(keeper);
  fx.step(keeper); // the 4th merge: published to the subscriber only
  CHECK(fx.queue() == "[asker, subscriber]");
  fx.step(asker);
  fx.step(subscriber);
  CHECK(*log == std::vector<std::string>{"subscriber 0", "asker 2", "subscriber 4"});
  CHECK(fx.queue() == "[]");
}

TEST_CASE("a host's statistics relay subscribes once per stream and hands the keeper's "
          "exact snapshots to every view of the host") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  keeper_fixture fx;
  auto keeper = spawn_stats_keeper(*fx.sys, fx.options(1, 0));
  caf::scoped_actor self{*fx.sys};
  const size_t dim = 5;
  CHECK(ask<uint64_t>(self, keeper, declare_atom::value, std::string{"obs"},
                      uint64_t{dim}) == dim);
  // Between the relay and the keeper, a forwarder that counts subscriptions
  // (delegating keeps the relay as the keeper's subscriber).
  auto subscriptions = std::make_shared<std::atomic<int>>(0);
  auto counter = fx.sys->spawn([keeper, subscriptions](caf::event_based_actor* me) {
    return caf::behavior{
      [me, keeper, subscriptions](subscribe_atom a, const std::string& s) {
        if (s == "obs")
          ++*subscriptions;
        return me->delegate(keeper, a, s);
      },
      [me, keeper](snapshot_atom a, const std::string& s) {
        return me->delegate(keeper, a, s);
      }};
  });
  auto relay = spawn_stats_relay(*fx.sys, counter);
  std::vector<std::shared_ptr<learners::stats_view>> views;
  for (int i = 0; i < 3; ++i) {
    auto v = subscribe_view(*fx.sys, relay, "obs", dim);
    REQUIRE_MESSAGE(v, (v ? std::string{} : v.err().message));
    views.push_back(*v);
  }
  CHECK(subscriptions->load() == 1);
  // A stream the keeper does not have: the view hears the keeper's refusal.
  auto missing = subscribe_view(*fx.sys, relay, "nope", dim);
  REQUIRE_FALSE(missing);
  CHECK(missing.err().message.find("nope") != std::string::npos);

  std::vector<float> all;
  std::uniform_int_distribution<size_t> rows(1, 300);
  const uint64_t batches = 12;
  for (uint64_t b = 0; b < batches; ++b) {
    auto x = random_rows(rng, rows(rng), dim, 3.0, 2.0);
    all.insert(all.end(), x.begin(), x.end());
    self->send(keeper, delta_of("obs", "w1",
                                kernels::compute_moments(x.data(), x.size() / dim, dim)));
  }
  sync(self, keeper);
  const auto want = reference(all, dim);
  const auto var = want.variance();
  for (auto& v : views) {
    // Bounded wait for the last publication to reach this view.
    const auto deadline = std::chrono::steady_clock::now() + test::wait_limit;
    while (v->read().version < batches && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    const auto& snap = v->read();
    REQUIRE_MESSAGE(snap.version == batches, "a view did not reach the keeper's version");
    CHECK(snap.count == want.count);
    for (size_t j = 0; j < dim; ++j) {
      CHECK(std::fabs(snap.mean[j] - want.mean[j]) <=
            1e-12 * std::fabs(want.mean[j]) + 1e-12);
      CHECK(std::fabs(snap.var[j] - var[j]) <= 1e-12 * var[j]);
    }
  }
  CHECK(subscriptions->load() == 1);
  // Its keeper (here the forwarder) gone: the relay ends with it.
  self->monitor(relay);
  self->send_exit(counter, caf::exit_reason::user_shutdown);
  bool relay_down = false;
  self->receive([&](caf::down_msg& d) { relay_down = d.source == relay.address(); },
                caf::after(test::wait_limit) >> [] {});
  CHECK(relay_down);
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}

TEST_CASE(
  "stats.freeze_after: the snapshot that reaches the sample count is the last one "
  "readers get, while the keeper's own moments go on") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  keeper_fixture fx;
  auto opts = fx.options(1, 0);
  opts.freeze_after = 200 + rng() % 2000;
  CAPTURE(opts.freeze_after);
  auto keeper = spawn_stats_keeper(*fx.sys, opts);
  caf::scoped_actor self{*fx.sys};
  const size_t dim = 3;
  ask<uint64_t>(self, keeper, declare_atom::value, std::string{"obs"}, uint64_t{dim});
  auto early = subscribe_view(*fx.sys, keeper, "obs", dim);
  REQUIRE(early.ok());
  std::vector<float> before, all;
  uint64_t frozen_version = 0, merged = 0;
  // Deltas until the count passes the limit, then a few more.
  size_t after = 0;
  while (after < 3) {
    auto x = random_rows(rng, 50 + rng() % 250, dim, 2.0 + merged, 1.0 + 0.1 * merged);
    all.insert(all.end(), x.begin(), x.end());
    if (frozen_version == 0)
      before.insert(before.end(), x.begin(), x.end());
    self->send(keeper, delta_of("obs", "w",
                                kernels::compute_moments(x.data(), x.size() / dim, dim)));
    ++merged;
    if (frozen_version == 0 && before.size() / dim >= opts.freeze_after)
      frozen_version = merged;
    else if (frozen_version != 0)
      ++after;
  }
  sync(self, keeper);
  const auto want = reference(before, dim);
  const auto want_var = want.variance();
  auto check_frozen = [&](const learners::stats_snapshot& got) {
    CHECK(got.version == frozen_version);
    CHECK(got.count == want.count);
    REQUIRE(got.mean.size() == dim);
    for (size_t j = 0; j < dim; ++j) {
      CHECK(std::fabs(got.mean[j] - want.mean[j]) <=
            1e-12 * std::fabs(want.mean[j]) + 1e-12);
      CHECK(std::fabs(got.var[j] - want_var[j]) <= 1e-12 * want_var[j]);
    }
  };
  // A reader subscribed after the freeze gets the frozen snapshot.
  auto late = subscribe_view(*fx.sys, keeper, "obs", dim);
  REQUIRE(late.ok());
  check_frozen((*late)->read());
  // The early reader's last snapshot is the frozen one: once it is there, the
  // keeper (which answered the sync after publishing everything) sent no later one.
  const auto limit = std::chrono::steady_clock::now() + test::wait_limit;
  while ((*early)->read().version < frozen_version &&
         std::chrono::steady_clock::now() < limit)
    std::this_thread::yield();
  check_frozen((*early)->read());
  // The keeper's own moments include every delta.
  auto current =
    ask<learners::stats_snapshot>(self, keeper, snapshot_atom::value, std::string{"obs"});
  CHECK(current.version == merged);
  CHECK(current.count == all.size() / dim);
  {
    std::lock_guard<std::mutex> g(fx.log_mtx);
    REQUIRE(fx.log.size() == 1);
    CHECK(fx.log[0] ==
          fmt::format("troupe stats_keeper: stream 'obs' frozen at {} samples "
                      "(stats.freeze_after {}): readers keep this snapshot",
                      want.count, opts.freeze_after));
  }
  self->send_exit(keeper, caf::exit_reason::user_shutdown);
}
