#include "learners/model.hpp"
#include "tests/seed.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include <doctest/doctest.h>

using namespace troupe::learners;
using troupe::test::fresh_seed;

namespace {

model_spec discrete_spec(std::vector<int64_t> hidden, batch_norm_mode bn) {
  model_spec s;
  s.obs_dim = 5;
  s.action = action_kind::discrete;
  s.n = 3;
  s.hidden = std::move(hidden);
  s.batch_norm = bn;
  return s;
}

std::vector<std::string> names(const actor_critic& m) {
  std::vector<std::string> out;
  for (const auto& t : m.tensors())
    out.push_back(t.name);
  return out;
}

// Plain float64 loops over the model's tensors, looked up by PyTorch name.
std::vector<double> reference_sequential(const actor_critic& m, const std::string& prefix,
                                         const std::vector<double>& x, size_t rows) {
  auto find = [&](const std::string& name) -> const_tensor_ref {
    for (const auto& t : m.tensors())
      if (t.name == name)
        return t;
    FAIL("missing tensor ", name);
    return {};
  };
  const auto& spec = m.spec();
  bool bn = spec.batch_norm != batch_norm_mode::none;
  size_t stride = bn ? 3 : 2;
  std::vector<double> cur = x;
  size_t in = static_cast<size_t>(spec.obs_dim);
  for (size_t l = 0; l <= spec.hidden.size(); ++l) {
    auto w = find(prefix + "." + std::to_string(l * stride) + ".weight");
    auto b = find(prefix + "." + std::to_string(l * stride) + ".bias");
    size_t out = static_cast<size_t>(w.shape[0]);
    REQUIRE(static_cast<size_t>(w.shape[1]) == in);
    std::vector<double> next(rows * out);
    for (size_t r = 0; r < rows; ++r)
      for (size_t o = 0; o < out; ++o) {
        double acc = b.data[o];
        for (size_t i = 0; i < in; ++i)
          acc += static_cast<double>(w.data[o * in + i]) * cur[r * in + i];
        next[r * out + o] = acc;
      }
    if (l < spec.hidden.size()) {
      if (bn) {
        std::string p = prefix + "." + std::to_string(l * stride + 1);
        auto g = find(p + ".weight");
        auto be = find(p + ".bias");
        auto rm = find(p + ".running_mean");
        auto rv = find(p + ".running_var");
        for (size_t r = 0; r < rows; ++r)
          for (size_t o = 0; o < out; ++o) {
            double& v = next[r * out + o];
            v =
              (v - rm.data[o]) / std::sqrt(rv.data[o] + spec.batch_norm_eps) * g.data[o] +
              be.data[o];
          }
      }
      for (auto& v : next)
        v = spec.activation == activation_kind::tanh ? std::tanh(v) : std::max(v, 0.0);
    }
    cur = std::move(next);
    in = out;
  }
  return cur;
}

void randomize(actor_critic& m, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::uniform_real_distribution<float> pos(0.5f, 2.0f);
  for (auto& t : m.tensors()) {
    bool var = t.name.find("running_var") != std::string::npos;
    for (size_t i = 0; i < t.size(); ++i)
      t.data[i] = var ? pos(rng) : u(rng);
  }
}

// Outputs are sums of terms of size ~1 that may cancel: below 0.01 the error
// is measured against 0.01.
double rel_err(double a, double b) {
  return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-2});
}

} // namespace

TEST_CASE("a discrete policy's tensors carry CleanRL's names and PyTorch shapes") {
  actor_critic m(discrete_spec({64, 64}, batch_norm_mode::none), 1);
  std::vector<std::string> expected{
    "critic.0.weight", "critic.0.bias", "critic.2.weight", "critic.2.bias",
    "critic.4.weight", "critic.4.bias", "actor.0.weight",  "actor.0.bias",
    "actor.2.weight",  "actor.2.bias",  "actor.4.weight",  "actor.4.bias"};
  CHECK(names(m) == expected);
  auto t = m.tensors();
  CHECK(t[0].shape == std::vector<int64_t>{64, 5});
  CHECK(t[4].shape == std::vector<int64_t>{1, 64});
  CHECK(t[10].shape == std::vector<int64_t>{3, 64});
  size_t total = 0;
  for (const auto& x : t)
    total += x.size();
  CHECK(total == m.param_count() + m.buffer_count());
}

TEST_CASE("a box policy has actor_mean layers and a [1, act_dim] actor_logstd") {
  model_spec s;
  s.obs_dim = 3;
  s.action = action_kind::box;
  s.act_dim = 2;
  s.hidden = {8};
  actor_critic m(s, 7);
  std::vector<std::string> expected{
    "critic.0.weight",     "critic.0.bias",       "critic.2.weight",
    "critic.2.bias",       "actor_mean.0.weight", "actor_mean.0.bias",
    "actor_mean.2.weight", "actor_mean.2.bias",   "actor_logstd"};
  CHECK(names(m) == expected);
  CHECK(m.tensors().back().shape == std::vector<int64_t>{1, 2});
}

TEST_CASE("batch norm layers sit between Linear and activation in the Sequential") {
  actor_critic m(discrete_spec({4, 6}, batch_norm_mode::global), 3);
  auto n = names(m);
  for (const char* expected :
       {"actor.0.weight", "actor.1.weight", "actor.1.bias", "actor.1.running_mean",
        "actor.1.running_var", "actor.3.weight", "actor.4.running_var", "actor.6.weight",
        "critic.6.bias"})
    CHECK(std::find(n.begin(), n.end(), expected) != n.end());
  auto layers = m.batch_norm_layers();
  REQUIRE(layers.size() == 4);
  CHECK(layers[0].prefix == "actor.1");
  CHECK(layers[1].prefix == "actor.4");
  CHECK(layers[1].width == 6);
  CHECK(layers[2].prefix == "critic.1");
}

TEST_CASE(
  "orthogonal initialization gives orthogonal rows or columns scaled by the gain") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  actor_critic m(discrete_spec({64, 32}, batch_norm_mode::none), seed);
  auto check = [&](const std::string& name, double gain) {
    CAPTURE(name);
    for (const auto& t : m.tensors()) {
      if (t.name != name)
        continue;
      size_t rows = t.shape[0], cols = t.shape[1];
      bool by_rows = rows <= cols;
      size_t k = by_rows ? rows : cols, len = by_rows ? cols : rows;
      for (size_t a = 0; a < k; ++a)
        for (size_t b = 0; b < k; ++b) {
          double dot = 0;
          for (size_t i = 0; i < len; ++i) {
            double x = by_rows ? t.data[a * cols + i] : t.data[i * cols + a];
            double y = by_rows ? t.data[b * cols + i] : t.data[i * cols + b];
            dot += x * y;
          }
          const double want = a == b ? gain * gain : 0.0;
          CHECK(std::abs(dot - want) < 1e-5 * std::max(1.0, gain * gain));
        }
      return;
    }
    FAIL("no tensor ", name);
  };
  check("actor.0.weight", std::sqrt(2.0));
  check("actor.2.weight", std::sqrt(2.0));
  check("actor.4.weight", 0.01);
  check("critic.4.weight", 1.0);
  for (const auto& t : m.tensors())
    if (t.name.find(".bias") != std::string::npos)
      for (size_t i = 0; i < t.size(); ++i)
        CHECK(t.data[i] == 0.0f);
}

TEST_CASE("the same seed gives the same parameters and another seed different ones") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  auto spec = discrete_spec({16}, batch_norm_mode::none);
  actor_critic a(spec, seed), b(spec, seed), c(spec, seed + 1);
  CHECK(std::equal(a.params(), a.params() + a.param_count(), b.params()));
  CHECK_FALSE(std::equal(a.params(), a.params() + a.param_count(), c.params()));
}

TEST_CASE(
  "evaluation matches a float64 reference for every activation and batch norm mode") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (auto act : {activation_kind::tanh, activation_kind::relu})
    for (auto bn :
         {batch_norm_mode::none, batch_norm_mode::global, batch_norm_mode::local})
      for (bool box : {false, true}) {
        std::string act_name = to_string(act), bn_name = to_string(bn);
        CAPTURE(act_name);
        CAPTURE(bn_name);
        CAPTURE(box);
        auto spec = discrete_spec({7, 9}, bn);
        spec.activation = act;
        if (box) {
          spec.action = action_kind::box;
          spec.act_dim = 2;
        }
        actor_critic m(spec, rng());
        randomize(m, rng);
        const size_t rows = 11;
        std::normal_distribution<float> normal(0.0f, 1.5f);
        std::vector<float> obs(rows * spec.obs_dim);
        for (auto& v : obs)
          v = normal(rng);
        policy_output out;
        REQUIRE(m.evaluate(obs.data(), rows, nullptr, out));
        std::vector<double> x(obs.begin(), obs.end());
        auto head = reference_sequential(m, box ? "actor_mean" : "actor", x, rows);
        auto value = reference_sequential(m, "critic", x, rows);
        const auto& got_head = box ? out.mean : out.logits;
        REQUIRE(got_head.size() == head.size());
        REQUIRE(out.value.size() == rows);
        for (size_t i = 0; i < head.size(); ++i)
          CHECK(rel_err(got_head[i], head[i]) < 1e-4);
        for (size_t i = 0; i < rows; ++i)
          CHECK(rel_err(out.value[i], value[i]) < 1e-4);
        if (box) {
          REQUIRE(out.log_std.size() == 2);
          CHECK(out.log_std[0] == m.tensors().back().data[0]);
        }
      }
}

TEST_CASE("one output reused across batches of changing size and across policies gives "
          "each call's float64 reference") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  auto discrete = discrete_spec({16, 8}, batch_norm_mode::none);
  auto box = discrete;
  box.action = action_kind::box;
  box.act_dim = 2;
  actor_critic a(discrete, rng()), b(box, rng());
  randomize(a, rng);
  randomize(b, rng);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  policy_output out; // reused by every call below
  for (size_t rows : {300u, 5u, 1u, 600u, 300u})
    for (const actor_critic* m : {&a, &b}) {
      CAPTURE(rows);
      const bool is_box = m == &b;
      CAPTURE(is_box);
      std::vector<float> obs(rows * static_cast<size_t>(m->spec().obs_dim));
      for (auto& v : obs)
        v = normal(rng);
      REQUIRE(m->evaluate(obs.data(), rows, nullptr, out));
      std::vector<double> x(obs.begin(), obs.end());
      auto head = reference_sequential(*m, is_box ? "actor_mean" : "actor", x, rows);
      auto value = reference_sequential(*m, "critic", x, rows);
      const auto& got_head = is_box ? out.mean : out.logits;
      CHECK(out.rows == rows);
      REQUIRE(got_head.size() == head.size());
      REQUIRE(out.value.size() == rows);
      CHECK((is_box ? out.logits.empty() : out.mean.empty() && out.log_std.empty()));
      for (size_t i = 0; i < head.size(); ++i)
        CHECK(rel_err(got_head[i], head[i]) < 1e-4);
      for (size_t i = 0; i < rows; ++i)
        CHECK(rel_err(out.value[i], value[i]) < 1e-4);
    }
  // A copy of a used output is independent of it and evaluates like a fresh one.
  policy_output copy = out;
  std::vector<float> obs(3 * static_cast<size_t>(discrete.obs_dim), 0.25f);
  REQUIRE(a.evaluate(obs.data(), 3, nullptr, copy));
  REQUIRE(copy.logits.size() == 3 * static_cast<size_t>(discrete.n));
  CHECK(out.rows == 300);
}

TEST_CASE("evaluation normalizes and clips observations with the given statistics") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  auto spec = discrete_spec({8}, batch_norm_mode::none);
  spec.obs_norm = true;
  spec.obs_norm_clip = 2.0;
  actor_critic raw_spec_model(spec, seed);
  auto plain = spec;
  plain.obs_norm = false;
  actor_critic plain_model(plain, seed);
  stats_snapshot stats;
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int j = 0; j < spec.obs_dim; ++j) {
    stats.mean.push_back(u(rng));
    stats.var.push_back(0.1 + std::abs(u(rng)));
  }
  const size_t rows = 6;
  std::vector<float> obs(rows * spec.obs_dim);
  for (auto& v : obs)
    v = static_cast<float>(3.0 * u(rng));
  std::vector<float> normalized(obs.size());
  size_t clipped = 0;
  for (size_t r = 0; r < rows; ++r)
    for (int j = 0; j < spec.obs_dim; ++j) {
      double v = (obs[r * spec.obs_dim + j] - stats.mean[j]) /
                 std::sqrt(stats.var[j] + spec.obs_norm_eps);
      clipped += std::abs(v) > 2.0;
      normalized[r * spec.obs_dim + j] = static_cast<float>(std::clamp(v, -2.0, 2.0));
    }
  policy_output a, b;
  REQUIRE(raw_spec_model.evaluate(obs.data(), rows, &stats, a));
  REQUIRE(plain_model.evaluate(normalized.data(), rows, nullptr, b));
  CHECK(clipped > 0);
  for (size_t i = 0; i < a.logits.size(); ++i)
    CHECK(a.logits[i] == doctest::Approx(b.logits[i]).epsilon(1e-6));
  for (size_t i = 0; i < rows; ++i)
    CHECK(a.value[i] == doctest::Approx(b.value[i]).epsilon(1e-6));
  policy_output c;
  CHECK_FALSE(raw_spec_model.evaluate(obs.data(), rows, nullptr, c));
  stats.mean.pop_back();
  CHECK_FALSE(raw_spec_model.evaluate(obs.data(), rows, &stats, c));
}

TEST_CASE("invalid specs are refused with a message naming the field") {
  auto spec = discrete_spec({8}, batch_norm_mode::none);
  spec.n = 1;
  auto m = actor_critic::create(spec, 1);
  REQUIRE_FALSE(m);
  CHECK(m.err().message.find("n in [2") != std::string::npos);
  spec = discrete_spec({8, 0}, batch_norm_mode::none);
  auto m2 = actor_critic::create(spec, 1);
  REQUIRE_FALSE(m2);
  CHECK(m2.err().message.find("hidden[1]") != std::string::npos);
  spec = discrete_spec({}, batch_norm_mode::local);
  CHECK_FALSE(actor_critic::create(spec, 1));
  CHECK_FALSE(parse_activation("gelu"));
  CHECK(*parse_batch_norm("global") == batch_norm_mode::global);
}

TEST_CASE("global statistics from views become the running statistics") {
  actor_critic m(discrete_spec({3}, batch_norm_mode::global), 2);
  auto layers = m.batch_norm_layers();
  REQUIRE(layers.size() == 2);
  stats_view actor_view(3, "actor.1"), critic_view(3, "critic.1");
  double mean[3] = {0.5, -1.0, 2.0}, var[3] = {2.0, 3.0, 0.25};
  REQUIRE(actor_view.publish(4, 100, mean, var, 3).ok());
  REQUIRE(m.read_global_stats({&actor_view, &critic_view}));
  for (int j = 0; j < 3; ++j) {
    CHECK(m.buffers()[layers[0].running_mean + j] == static_cast<float>(mean[j]));
    CHECK(m.buffers()[layers[0].running_var + j] == static_cast<float>(var[j]));
    CHECK(m.buffers()[layers[1].running_var + j] == 1.0f);
  }
  stats_view wrong(4);
  CHECK_FALSE(m.read_global_stats({&actor_view, &wrong}));
  CHECK_FALSE(m.read_global_stats({&actor_view}));
}
