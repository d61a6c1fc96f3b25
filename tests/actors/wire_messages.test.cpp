// The messages that cross processes keep their numeric arrays bit for bit
// through CAF's binary serialization, written as the host's bytes in one block
// (actors/raw_array.hpp); a truncated or lying message is an error, never a
// crash or an allocation of the claimed size.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::actors;
using troupe::test::fresh_seed;

namespace {

struct system_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  system_fixture() {
    register_messages(cfg);
    cfg.set("scheduler.max-threads", 1);
    sys = std::make_unique<caf::actor_system>(cfg);
  }
};

// Random bit patterns, NaNs with payloads and infinities included: the wire
// must not normalize them.
template <class T>
std::vector<T> random_bits(std::mt19937_64& gen, size_t n) {
  std::vector<T> out(n);
  for (auto& x : out) {
    if constexpr (sizeof(T) == 4) {
      auto bits = static_cast<uint32_t>(gen());
      std::memcpy(&x, &bits, 4);
    } else {
      uint64_t bits = gen();
      std::memcpy(&x, &bits, 8);
    }
  }
  return out;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <class T>
std::vector<char> serialize(caf::actor_system& sys, T& x) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  REQUIRE_FALSE(sink(x));
  return buf;
}

// Whether `buf` holds `v`'s elements as the host's bytes, in one block.
template <class T>
bool holds_native_block(const std::vector<char>& buf, const std::vector<T>& v) {
  const char* first = reinterpret_cast<const char*>(v.data());
  return std::search(buf.begin(), buf.end(), first, first + v.size() * sizeof(T)) !=
         buf.end();
}

} // namespace

TEST_CASE(
  "wire: gradients, weights, batches and moments cross bit for bit as raw blocks") {
  system_fixture fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const size_t n = 1 + gen() % 5000;
  CAPTURE(n);

  gradient_update g;
  g.learner = "w1.learner0";
  g.base_version = gen();
  g.samples = gen();
  g.learning_rate = 2.5e-4;
  g.grad = random_bits<float>(gen, n);
  g.buffers = random_bits<float>(gen, n / 7);
  g.worker = "w1";
  g.incarnation = gen() | 1;
  g.sequence = gen();
  auto buf = serialize(*fx.sys, g);
  CHECK(holds_native_block(buf, g.grad));
  gradient_update g2;
  caf::binary_deserializer gs{*fx.sys, buf};
  REQUIRE_FALSE(gs(g2));
  CHECK(same_bits(g2.grad, g.grad));
  CHECK(same_bits(g2.buffers, g.buffers));
  CHECK(g2.learner == g.learner);
  CHECK(g2.base_version == g.base_version);
  CHECK(g2.samples == g.samples);
  CHECK(g2.incarnation == g.incarnation);
  CHECK(g2.sequence == g.sequence);

  weights_reply w;
  w.version = gen();
  w.applied = false;
  w.rejected = true;
  w.params = random_bits<float>(gen, n);
  w.buffers = random_bits<float>(gen, 3);
  w.fenced = true;
  buf = serialize(*fx.sys, w);
  CHECK(holds_native_block(buf, w.params));
  weights_reply w2;
  caf::binary_deserializer ws{*fx.sys, buf};
  REQUIRE_FALSE(ws(w2));
  CHECK(same_bits(w2.params, w.params));
  CHECK(same_bits(w2.buffers, w.buffers));
  CHECK(w2.version == w.version);
  CHECK(w2.applied == w.applied);
  CHECK(w2.rejected == w.rejected);
  CHECK(w2.fenced == w.fenced);

  trajectory_batch t;
  t.runner = "w1.runner0";
  t.num_envs = 1 + gen() % 8;
  t.steps = 1 + gen() % 64;
  t.obs_dim = 4;
  t.action_dim = 1;
  const size_t rows = t.num_envs * t.steps;
  t.observations = random_bits<float>(gen, (t.steps + 1) * t.num_envs * t.obs_dim);
  t.actions = random_bits<float>(gen, rows);
  t.behavior_logp = random_bits<float>(gen, rows);
  t.rewards = random_bits<float>(gen, rows);
  t.terminated.assign(rows, 1);
  t.truncated.assign(rows, 0);
  t.autoreset.assign(rows, 1);
  t.episode_returns = random_bits<double>(gen, 3);
  t.episode_lengths = {gen(), gen()};
  t.policy_version = gen();
  t.obs_drift_kl = random_bits<double>(gen, 1)[0]; // the others stay NaN
  buf = serialize(*fx.sys, t);
  CHECK(holds_native_block(buf, t.observations));
  trajectory_batch t2;
  caf::binary_deserializer ts{*fx.sys, buf};
  REQUIRE_FALSE(ts(t2));
  CHECK(same_bits(t2.observations, t.observations));
  CHECK(same_bits(t2.actions, t.actions));
  CHECK(same_bits(t2.behavior_logp, t.behavior_logp));
  CHECK(same_bits(t2.rewards, t.rewards));
  CHECK(t2.terminated == t.terminated);
  CHECK(t2.autoreset == t.autoreset);
  CHECK(same_bits(t2.episode_returns, t.episode_returns));
  CHECK(t2.episode_lengths == t.episode_lengths);
  CHECK(t2.policy_version == t.policy_version);
  // The diagnostics cross raw, NaN included (CAF's packing of a NaN double
  // is undefined behaviour).
  for (auto field :
       {&trajectory_batch::obs_shift_kl, &trajectory_batch::obs_drift_kl,
        &trajectory_batch::return_std_shift, &trajectory_batch::return_std_drift})
    CHECK(std::memcmp(&(t2.*field), &(t.*field), sizeof(double)) == 0);
  learner_report rep;
  rep.learner = "w1.learner0";
  rep.obs_shift_kl = random_bits<double>(gen, 1)[0];
  auto rep_buf = serialize(*fx.sys, rep);
  learner_report rep2;
  caf::binary_deserializer rs{*fx.sys, rep_buf};
  REQUIRE_FALSE(rs(rep2));
  CHECK(rep2.learner == rep.learner);
  for (auto field :
       {&learner_report::obs_shift_kl, &learner_report::obs_drift_kl,
        &learner_report::return_std_shift, &learner_report::return_std_drift})
    CHECK(std::memcmp(&(rep2.*field), &(rep.*field), sizeof(double)) == 0);

  moments_delta d;
  d.stream = "obs";
  d.worker = "w1";
  d.count = gen();
  d.mean = random_bits<double>(gen, 1 + gen() % 300);
  d.m2 = random_bits<double>(gen, d.mean.size());
  d.incarnation = gen();
  d.seq_first = 3;
  d.seq_last = 9;
  buf = serialize(*fx.sys, d);
  CHECK(holds_native_block(buf, d.mean));
  moments_delta d2;
  caf::binary_deserializer ds{*fx.sys, buf};
  REQUIRE_FALSE(ds(d2));
  CHECK(same_bits(d2.mean, d.mean));
  CHECK(same_bits(d2.m2, d.m2));
  CHECK(d2.count == d.count);
  CHECK(d2.seq_last == d.seq_last);

  learners::stats_snapshot s;
  s.stream = "obs";
  s.version = gen();
  s.count = gen();
  s.mean = random_bits<double>(gen, 17);
  s.var = random_bits<double>(gen, 17);
  buf = serialize(*fx.sys, s);
  learners::stats_snapshot s2;
  caf::binary_deserializer ss{*fx.sys, buf};
  REQUIRE_FALSE(ss(s2));
  CHECK(same_bits(s2.mean, s.mean));
  CHECK(same_bits(s2.var, s.var));
  CHECK(s2.version == s.version);
}

TEST_CASE("wire: a truncated message or one whose count lies is an error, not a crash") {
  system_fixture fx;
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);

  weights_reply w;
  w.version = 7;
  w.params = random_bits<float>(gen, 1000 + gen() % 1000);
  auto buf = serialize(*fx.sys, w);
  // Every strict prefix fails to read (the last fields are two bools, so
  // cutting anywhere removes something the reader needs).
  for (size_t cut : {size_t{0}, size_t{5}, buf.size() / 2, buf.size() - 1}) {
    CAPTURE(cut);
    std::vector<char> part(buf.begin(), buf.begin() + static_cast<long>(cut));
    weights_reply out;
    caf::binary_deserializer source{*fx.sys, part};
    CHECK(source(out));
  }

  // A count of 2^30 floats (4 GiB; CAF's counts are 32-bit varints) followed
  // by a few bytes: the reader fails when the bytes run out, having allocated
  // at most one block.
  std::vector<float> small = random_bits<float>(gen, 8);
  std::vector<char> lie;
  {
    caf::binary_serializer sink{*fx.sys, lie};
    auto arr = raw(small);
    REQUIRE_FALSE(sink(arr));
  }
  // The count is the varint at the start: replace it by 2^40's.
  std::vector<char> forged;
  {
    caf::binary_serializer sink{*fx.sys, forged};
    size_t huge = size_t{1} << 30;
    REQUIRE_FALSE(sink.begin_sequence(huge));
  }
  size_t small_count_bytes = 1; // 8 < 128: one varint byte
  forged.insert(forged.end(), lie.begin() + static_cast<long>(small_count_bytes),
                lie.end());
  std::vector<float> out;
  caf::binary_deserializer source{*fx.sys, forged};
  auto arr = raw(out);
  CHECK(source(arr));
  CHECK(out.size() <= (size_t{1} << 16));
}
