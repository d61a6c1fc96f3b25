// The parameter server's replicas, one per host, all-reducing through real
// Gloo groups on loopback: sync mode equals one parameter server with the
// same learners, async rounds keep every replica's weights identical and
// apply every gradient once, and a replica whose weights differ or whose peer
// is lost ends with an error that says so.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "actors/parameter_server.hpp"
#include "actors/replica.hpp"
#include "edge/gloo_collective.hpp"
#include "tests/edge/gloo_groups.hpp"
#include "tests/actors/ask.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::actors;
using troupe::test::ask;
using troupe::test::fresh_seed;

namespace {

struct system_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  system_fixture() {
    register_messages(cfg);
    cfg.set("scheduler.max-threads", 2);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

std::vector<float> random_vector(std::mt19937_64& gen, size_t n, double scale) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<float> out(n);
  for (auto& x : out)
    x = static_cast<float>(normal(gen));
  return out;
}

// `n` Gloo groups of one rendezvous (the replicas').
std::vector<std::shared_ptr<collective>>
groups_of(edge::rendezvous_store& store, size_t n, std::chrono::milliseconds timeout) {
  return test::connect_groups(store, n, "replicas", timeout);
}

gradient_update gradient(const std::string& learner, uint64_t base, uint64_t samples,
                         double lr, std::vector<float> g) {
  gradient_update u;
  u.learner = learner;
  u.base_version = base;
  u.samples = samples;
  u.learning_rate = lr;
  u.grad = std::move(g);
  return u;
}

// Sends every gradient as a request at once (each request leaves when it is
// made), then waits for every answer.
std::vector<weights_reply> send_all(caf::scoped_actor& self,
                                    const std::vector<caf::actor>& dest,
                                    std::vector<gradient_update> grads) {
  std::vector<weights_reply> out(grads.size());
  using handle = decltype(self->request(dest[0], test::wait_limit, grads[0]));
  std::vector<handle> pending;
  for (size_t i = 0; i < grads.size(); ++i)
    pending.push_back(self->request(dest[i], test::wait_limit, std::move(grads[i])));
  for (size_t i = 0; i < pending.size(); ++i)
    pending[i].receive([&](weights_reply& r) { out[i] = std::move(r); },
                       [&](caf::error& e) {
                         FAIL("gradient "
                              << i << " got no answer: " << self->system().render(e));
                       });
  return out;
}

} // namespace

TEST_CASE("the weights' hash changes with any one bit of any weight or buffer, with "
          "two weights swapped and with a weight moved from params to buffers") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> params(1 + rng() % 300), buffers(rng() % 20);
    for (auto& x : params)
      x = normal(rng);
    for (auto& x : buffers)
      x = normal(rng);
    const uint64_t h = weights_hash(params, buffers);
    CHECK(weights_hash(params, buffers) == h); // only the values count
    auto flip = [&](std::vector<float>& v) {
      const size_t i = rng() % v.size();
      const int bit = static_cast<int>(rng() % 32);
      uint32_t w;
      std::memcpy(&w, &v[i], sizeof w);
      w ^= 1u << bit;
      float before = v[i];
      std::memcpy(&v[i], &w, sizeof w);
      CAPTURE(i);
      CAPTURE(bit);
      CHECK(weights_hash(params, buffers) != h);
      v[i] = before;
    };
    for (int k = 0; k < 20; ++k)
      flip(params);
    if (!buffers.empty())
      for (int k = 0; k < 20; ++k)
        flip(buffers);
    if (params.size() >= 2) {
      const size_t i = rng() % params.size(), j = (i + 1) % params.size();
      if (params[i] != params[j]) {
        std::swap(params[i], params[j]);
        CHECK(weights_hash(params, buffers) != h);
        std::swap(params[i], params[j]);
      }
      std::vector<float> fewer(params.begin(), params.end() - 1), more = buffers;
      more.insert(more.begin(), params.back());
      CHECK(weights_hash(fewer, more) != h);
    }
    CHECK(weights_hash(params, buffers) == h);
  }
}

TEST_CASE("sync replicas on two hosts take the same steps as one sync parameter server "
          "with the same four learners") {
  system_fixture fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 301, hosts = 2, per_host = 2, steps = 12;
  auto params = random_vector(gen, n, 1.0);
  edge::memory_store store;
  auto groups = groups_of(store, hosts, std::chrono::seconds(20));
  replica_options ro;
  ro.sync = true;
  ro.num_learners = per_host;
  ro.max_grad_norm = 0.5;
  parameter_server_options po;
  po.sync = true;
  po.num_learners = hosts * per_host;
  po.max_grad_norm = 0.5;
  std::vector<caf::actor> replicas;
  for (size_t h = 0; h < hosts; ++h) {
    ro.host = "host" + std::to_string(h);
    replicas.push_back(spawn_replica(*fx.sys, ro, groups[h], params, {}));
  }
  auto server =
    spawn_parameter_server(*fx.sys, po, params, {}, nullptr, server_thread::scheduler);
  caf::scoped_actor self{*fx.sys};
  std::uniform_int_distribution<uint64_t> rows(1, 600);
  for (size_t k = 0; k < steps; ++k) {
    std::vector<gradient_update> to_replicas, to_server;
    std::vector<caf::actor> replica_dest, server_dest;
    for (size_t l = 0; l < hosts * per_host; ++l) {
      auto g = gradient("learner" + std::to_string(l), k, rows(gen), 1e-3 * (1 + l % 2),
                        random_vector(gen, n, 0.3));
      to_server.push_back(g);
      server_dest.push_back(server);
      to_replicas.push_back(std::move(g));
      replica_dest.push_back(replicas[l / per_host]);
    }
    auto from_replicas = send_all(self, replica_dest, std::move(to_replicas));
    auto from_server = send_all(self, server_dest, std::move(to_server));
    for (size_t l = 0; l < from_replicas.size(); ++l) {
      CAPTURE(l);
      CHECK(from_replicas[l].applied);
      CHECK(from_replicas[l].version == k + 1);
      CHECK(from_server[l].version == k + 1);
    }
  }
  auto reference = ask<parameter_server_state>(self, server, state_atom::value);
  std::vector<parameter_server_state> states;
  for (auto& r : replicas)
    states.push_back(ask<parameter_server_state>(self, r, state_atom::value));
  double worst = 0;
  for (size_t i = 0; i < n; ++i)
    worst = std::max(
      worst, static_cast<double>(std::fabs(states[0].params[i] - reference.params[i])));
  CHECK(worst <= 1e-6);
  CHECK(states[0].version == steps);
  CHECK(states[0].adam_steps == reference.adam_steps);
  CHECK(states[0].counters.applied == steps * hosts * per_host);
  for (size_t h = 1; h < hosts; ++h) {
    CHECK(std::memcmp(states[h].params.data(), states[0].params.data(),
                      n * sizeof(float)) == 0);
    CHECK(states[h].adam_m == states[0].adam_m);
    CHECK(states[h].adam_v == states[0].adam_v);
  }
  auto rounds = ask<replica_status>(self, replicas[1], rounds_atom::value);
  CHECK(rounds.rounds == steps);
  CHECK(rounds.weights_hash == weights_hash(states[0].params, states[0].buffers));
  for (auto& r : replicas)
    self->send_exit(r, caf::exit_reason::user_shutdown);
}

TEST_CASE("async replicas on three hosts apply every gradient once and keep identical "
          "weights, whatever each host sends") {
  system_fixture fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 97, hosts = 3;
  auto params = random_vector(gen, n, 1.0);
  edge::memory_store store;
  auto groups = groups_of(store, hosts, std::chrono::seconds(20));
  replica_options ro;
  ro.max_staleness = 1000; // nothing dropped: every gradient must be applied
  std::vector<caf::actor> replicas;
  for (size_t h = 0; h < hosts; ++h) {
    ro.host = "host" + std::to_string(h);
    replicas.push_back(spawn_replica(*fx.sys, ro, groups[h], params, {}));
  }
  caf::scoped_actor self{*fx.sys};
  // Host 0's three learners send every time, host 1's one learner every
  // fourth time, host 2 nothing: the others' rounds must not wait for host 2.
  // Each learner waits for its answer before it sends again, as learners do;
  // a learner's second gradient in one round waits for the next round.
  uint64_t sent = 0, env_steps = 0;
  for (int i = 0; i < 16; ++i) {
    std::vector<gradient_update> grads;
    std::vector<caf::actor> dest;
    for (int l = 0; l < 4; ++l) {
      const size_t h = l < 3 ? 0 : 1;
      if (h == 1 && i % 4 != 0)
        continue;
      auto g = gradient("h" + std::to_string(h) + "l" + std::to_string(l), 0, 64, 1e-3,
                        random_vector(gen, n, 0.1));
      g.batch_env_steps = 64;
      env_steps += 64;
      grads.push_back(std::move(g));
      dest.push_back(replicas[h]);
      ++sent;
    }
    for (auto& r : send_all(self, dest, std::move(grads)))
      CHECK(r.applied);
  }
  // The last round may still be in flight or gathering: wait for it.
  test::wait_until(
    [&] {
      for (auto& r : replicas)
        if (ask<parameter_server_status>(self, r, status_atom::value).applied != sent)
          return false;
      return true;
    },
    "every replica to apply all 52 gradients");
  std::vector<parameter_server_state> states;
  for (auto& r : replicas)
    states.push_back(ask<parameter_server_state>(self, r, state_atom::value));
  for (size_t h = 0; h < hosts; ++h) {
    CAPTURE(h);
    CHECK(states[h].counters.applied == sent);
    CHECK(states[h].counters.env_steps == env_steps);
    CHECK(states[h].version == states[0].version);
    CHECK(std::memcmp(states[h].params.data(), states[0].params.data(),
                      n * sizeof(float)) == 0);
  }
  CHECK(states[0].params != params);
  auto r0 = ask<replica_status>(self, replicas[0], rounds_atom::value);
  auto r2 = ask<replica_status>(self, replicas[2], rounds_atom::value);
  CHECK(r0.contributed == 48);
  CHECK(r2.contributed == 0);
  // Host 2 took part in every round: idle rounds go on in the background, so
  // the members are at most one round apart, and host 2 was asked later.
  CHECK(r2.rounds + 1 >= r0.rounds);
  // The rounds that carried a gradient are the same rounds everywhere.
  CHECK(r0.rounds - r0.empty_rounds == r2.rounds - r2.empty_rounds);
  // Steps = rounds that carried a gradient; never more than the gradients.
  CHECK(states[0].version == r0.rounds - r0.empty_rounds);
  CHECK(states[0].version <= sent);
  for (auto& r : replicas)
    self->send_exit(r, caf::exit_reason::user_shutdown);
}

TEST_CASE("a group's first exchange hands rank 0's weights, Adam state and counters to "
          "every member") {
  system_fixture fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 29;
  edge::memory_store store;
  auto groups = groups_of(store, 3, std::chrono::seconds(20));
  replica_options ro;
  ro.sync = true;
  caf::scoped_actor self{*fx.sys};
  // Rank 0 as a resumed coordinator: it starts from a checkpoint's state, before
  // the first round. The others start from weights of their own.
  parameter_server_state resumed;
  resumed.version = 41;
  resumed.adam_steps = 41;
  resumed.params = random_vector(gen, n, 1.0);
  resumed.adam_m = random_vector(gen, n, 0.1);
  resumed.adam_v = random_vector(gen, n, 0.1);
  for (auto& x : resumed.adam_v)
    x = std::fabs(x);
  resumed.counters.env_steps = 123456;
  resumed.counters.batches = 789;
  std::vector<caf::actor> replicas;
  for (size_t h = 0; h < 3; ++h) {
    ro.host = "h" + std::to_string(h);
    // Rank 0 starts from the resumed state, with a learner; the others from
    // weights of their own, with none.
    ro.num_learners = h == 0 ? 1 : 0;
    replicas.push_back(spawn_replica(
      *fx.sys, ro, groups[h], random_vector(gen, n, 1.0), {}, nullptr,
      h == 0 ? std::optional<parameter_server_state>(resumed) : std::nullopt));
  }
  auto reply = ask<weights_reply>(
    self, replicas[0], gradient("l", 41, 10, 0.0, std::vector<float>(n, 0.0f)));
  CHECK(reply.version == 42); // one step (lr 0) on top of the resumed 41
  auto first = ask<parameter_server_state>(self, replicas[0], state_atom::value);
  CHECK(first.adam_steps == 42);
  for (size_t h = 1; h < 3; ++h) {
    CAPTURE(h);
    test::wait_until(
      [&] {
        return ask<parameter_server_state>(self, replicas[h], state_atom::value)
                 .version >= 42;
      },
      "the first round's step");
    auto st = ask<parameter_server_state>(self, replicas[h], state_atom::value);
    CHECK(st.version == 42);
    CHECK(st.adam_steps == 42);
    CHECK(st.counters.env_steps == 123456);
    CHECK(st.counters.batches == 789);
    CHECK(st.params == first.params);
    CHECK(st.adam_m == first.adam_m);
    CHECK(st.adam_v == first.adam_v);
  }
  for (auto& r : replicas)
    self->send_exit(r, caf::exit_reason::user_shutdown);
}

TEST_CASE("replicas whose weights come to differ stop at the next round, naming the "
          "divergence") {
  system_fixture fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 41;
  auto params = random_vector(gen, n, 1.0);
  edge::memory_store store;
  auto groups = groups_of(store, 2, std::chrono::seconds(20));
  replica_options ro; // async, no learners: idle rounds
  caf::scoped_actor self{*fx.sys};
  ro.host = "a";
  auto a = spawn_replica(*fx.sys, ro, groups[0], params, {});
  ro.host = "b";
  auto b = spawn_replica(*fx.sys, ro, groups[1], params, {});
  groups.clear();
  self->monitor(a);
  self->monitor(b);
  test::wait_until(
    [&] { return ask<replica_status>(self, b, rounds_atom::value).rounds >= 1; },
    "the first round");
  auto st = ask<parameter_server_state>(self, b, state_atom::value);
  st.params[17] = std::nextafter(st.params[17], 10.0f); // one bit apart
  ask<uint64_t>(self, b, state_atom::value, st);
  for (int i = 0; i < 2; ++i)
    self->receive(
      [&](caf::down_msg& d) {
        const auto text = error_message(self->system(), d.reason);
        CAPTURE(text);
        CHECK(text.find("the weights differ between hosts at round") !=
              std::string::npos);
      },
      test::fail_after("both replicas to stop"));
}

TEST_CASE("a replica whose peer is lost ends with the round's Gloo error and the peer's "
          "address") {
  system_fixture fx;
  const size_t n = 23;
  std::vector<float> params(n, 0.5f);
  edge::memory_store store;
  auto groups = groups_of(store, 2, std::chrono::seconds(10));
  replica_options ro;
  ro.host = "survivor";
  caf::scoped_actor self{*fx.sys};
  auto survivor = spawn_replica(*fx.sys, ro, groups[0], params, {});
  groups[0].reset();
  groups[1].reset(); // the lost host: its connections close
  self->monitor(survivor);
  self->receive(
    [&](caf::down_msg& d) {
      const auto text = error_message(self->system(), d.reason);
      CAPTURE(text);
      // Its group's first exchange (before any round) meets the closed peer;
      // a fixed group does not form again.
      CHECK(
        text.find("replica of host 'survivor': the group's first exchange failed: ") !=
        std::string::npos);
      CHECK(text.find("failed: gloo ") != std::string::npos);
      CHECK(text.find("127.0.0.1") != std::string::npos);
    },
    test::fail_after("the replica to stop"));
}

namespace {

// A group of one whose epoch 1 is replaced before its first exchange, as when
// a host joins while an elastic group forms: every operation of epoch 1
// fails; reform() moves to epoch 2, where operations succeed (a group of one
// sums and broadcasts nothing). `elastic` says whether it forms again.
class replaced_once final : public collective {
public:
  explicit replaced_once(bool elastic) : elastic_(elastic) {}
  size_t rank() const override { return 0; }
  size_t size() const override { return 1; }
  status allreduce_sum(double*, size_t) override { return op(); }
  status broadcast(void*, size_t, size_t) override { return op(); }
  std::string describe() const override {
    return "rank 0 of 1, epoch " + std::to_string(epoch_.load());
  }
  bool forms_again() const override { return elastic_; }
  status reform(const std::string& why) override {
    if (!elastic_)
      return collective::reform(why);
    reforms_.fetch_add(1);
    epoch_.store(2);
    return {};
  }
  int reforms() const { return reforms_.load(); }

private:
  status op() {
    if (epoch_.load() == 1)
      return make_error(errc::unavailable,
                        "the group of epoch 1 is replaced by epoch 2 (rank 0 of 1)");
    return {};
  }
  const bool elastic_;
  std::atomic<int> epoch_{1};
  std::atomic<int> reforms_{0};
};

} // namespace

TEST_CASE("a replica whose elastic group is replaced during its first exchange forms "
          "the next one and applies gradients, and one in a fixed group ends naming "
          "the failure") {
  system_fixture fx;
  std::mt19937_64 gen(fresh_seed());
  const size_t n = 31;
  const auto params = random_vector(gen, n, 1.0);
  caf::scoped_actor self{*fx.sys};
  auto lines = std::make_shared<std::vector<std::string>>();
  auto mtx = std::make_shared<std::mutex>();
  replica_options ro;
  ro.host = "joiner";
  ro.log = [lines, mtx](const std::string& line) {
    std::lock_guard<std::mutex> g(*mtx);
    lines->push_back(line);
  };
  {
    auto group = std::make_shared<replaced_once>(/*elastic=*/true);
    auto r = spawn_replica(*fx.sys, ro, group, params, {});
    auto g = gradient("l0", 0, 64, 1e-3, random_vector(gen, n, 0.1));
    auto replies = send_all(self, {r}, {g});
    CHECK(replies[0].applied);
    CHECK(!replies[0].rejected);
    test::wait_until(
      [&] {
        return ask<parameter_server_status>(self, r, status_atom::value).applied == 1;
      },
      "the replica to apply the gradient");
    CHECK(group->reforms() == 1);
    {
      std::lock_guard<std::mutex> lock(*mtx);
      bool said = false;
      for (auto& line : *lines)
        said |=
          line.find("replica of host 'joiner': the group's first exchange failed: "
                    "the group of epoch 1 is replaced by epoch 2 (rank 0 of 1); the "
                    "group forms again (try 1 of 5)") != std::string::npos;
      CHECK(said);
    }
    self->send_exit(r, caf::exit_reason::user_shutdown);
  }
  {
    auto group = std::make_shared<replaced_once>(/*elastic=*/false);
    auto r = spawn_replica(*fx.sys, ro, group, params, {});
    self->monitor(r);
    self->receive(
      [&](caf::down_msg& d) {
        const auto text = error_message(self->system(), d.reason);
        CAPTURE(text);
        CHECK(text ==
              "replica of host 'joiner': the group's first exchange failed: the group "
              "of epoch 1 is replaced by epoch 2 (rank 0 of 1)");
      },
      test::fail_after("the replica in a fixed group to stop"));
  }
}
