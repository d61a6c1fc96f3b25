// Gradient checks: every hand-written gradient against central finite
// differences of the loss in float64, for every loss, head, activation and
// normalization mode.
#include "learners/losses.hpp"
#include "tests/seed.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>
#include <cstdlib>
#include <cstdio>

#include <doctest/doctest.h>

using namespace troupe::learners;
using troupe::test::fresh_seed;

namespace {

struct check_result {
  size_t checked = 0;
  size_t non_smooth = 0;
  double worst = 0;
  std::string worst_name;
};

// Fourth-order central difference of f along parameter i with step h.
double finite_difference(const std::function<double(const std::vector<double>&)>& f,
                         std::vector<double> p, size_t i, double h) {
  const double x = p[i];
  auto at = [&](double offset) {
    p[i] = x + offset;
    return f(p);
  };
  return (-at(2 * h) + 8 * at(h) - 8 * at(-h) + at(-2 * h)) / (12 * h);
}

// Random V-trace inputs for `steps` x `envs` rows: log-ratios with standard
// deviation `log_rho_sd`, discounts 0 (an episode's end, 15%) or in
// [0.9, 1], standard normal rewards, values and bootstrap values.
struct vtrace_inputs {
  std::vector<double> log_rhos, discounts, rewards, values, bootstrap;
};

vtrace_inputs random_vtrace_inputs(std::mt19937_64& rng, size_t steps, size_t envs,
                                   double log_rho_sd) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const size_t n = steps * envs;
  vtrace_inputs in{std::vector<double>(n), std::vector<double>(n), std::vector<double>(n),
                   std::vector<double>(n), std::vector<double>(envs)};
  for (size_t i = 0; i < n; ++i) {
    in.log_rhos[i] = log_rho_sd * normal(rng);
    in.discounts[i] = u(rng) < 0.15 ? 0.0 : 0.9 + 0.1 * u(rng);
    in.rewards[i] = normal(rng);
    in.values[i] = normal(rng);
  }
  for (auto& b : in.bootstrap)
    b = normal(rng);
  return in;
}

std::string name_of(const model_layout& layout, size_t i) {
  for (const auto& t : layout.tensors)
    if (!t.is_buffer && i >= t.offset && i < t.offset + t.size)
      return t.name + "[" + std::to_string(i - t.offset) + "]";
  return "?";
}

// Relative error |g - fd| / max(|g|, |fd|, 1e-4 max_j |g_j|), the floor keeping
// components that are zero up to rounding from dividing by nothing.
// Steps 1e-3, 1e-4, 1e-5 in turn: the component passes when one of them
// agrees with the gradient; it is compared (and fails) when two neighbouring
// steps agree with each other but not with it; when neither happens, a kink
// (ReLU, clip) lies within every step and it is counted as non-smooth.
check_result check_gradient(const model_layout& layout, const std::vector<double>& params,
                            const std::vector<double>& grad,
                            const std::function<double(const std::vector<double>&)>& f) {
  check_result out;
  double largest = 0;
  for (auto g : grad)
    largest = std::max(largest, std::abs(g));
  const double floor = 1e-4 * largest;
  auto rel = [&](double a, double b) {
    return std::abs(a - b) / std::max({std::abs(a), std::abs(b), floor});
  };
  for (size_t i = 0; i < params.size(); ++i) {
    double err = 0;
    bool decided = false;
    double previous = 0;
    for (double h : {1e-3, 1e-4, 1e-5}) {
      double fd = finite_difference(f, params, i, h);
      err = rel(grad[i], fd);
      if (err <= 1e-6 || (h < 1e-3 && rel(previous, fd) <= 1e-6)) {
        decided = true;
        break;
      }
      previous = fd;
    }
    if (!decided) {
      if (std::getenv("TROUPE_DEBUG_FD"))
        std::fprintf(stderr, "non-smooth: %s g=%.12g\n", name_of(layout, i).c_str(),
                     grad[i]);
      ++out.non_smooth;
      continue;
    }
    ++out.checked;
    if (err > out.worst) {
      out.worst = err;
      out.worst_name = name_of(layout, i);
    }
  }
  return out;
}

void require_good(const check_result& r, size_t total) {
  CAPTURE(r.worst_name);
  CAPTURE(r.non_smooth);
  CHECK(r.worst <= 1e-6);
  CHECK(r.checked + r.non_smooth == total);
  CHECK(r.non_smooth * 50 <= total); // at most 2% of components sit at a kink
}

model_spec small_spec(bool box, activation_kind act, batch_norm_mode bn) {
  model_spec s;
  s.obs_dim = 4;
  s.hidden = {6, 5};
  s.activation = act;
  s.batch_norm = bn;
  if (box) {
    s.action = action_kind::box;
    s.act_dim = 2;
  } else {
    s.n = 3;
  }
  return s;
}

// Parameters with magnitudes that exercise every branch (the CleanRL init
// makes the policy almost uniform, so every ratio would sit near 1).
struct random_model {
  model_layout layout;
  std::vector<double> params;
  std::vector<double> buffers;
};

random_model make_random_model(const model_spec& spec, std::mt19937_64& rng) {
  random_model m;
  m.layout = make_layout(spec);
  std::uniform_real_distribution<double> u(-0.8, 0.8);
  std::uniform_real_distribution<double> pos(0.5, 2.0);
  m.params.resize(m.layout.param_count);
  m.buffers.resize(m.layout.buffer_count);
  for (auto& p : m.params)
    p = u(rng);
  for (const auto& t : m.layout.tensors)
    if (t.is_buffer)
      for (size_t i = 0; i < t.size; ++i)
        m.buffers[t.offset + i] =
          t.name.find("running_var") != std::string::npos ? pos(rng) : u(rng) * 0.3;
  return m;
}

} // namespace

TEST_CASE("PPO gradients match finite differences for every head, activation and "
          "batch norm mode") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (bool box : {false, true})
    for (auto act : {activation_kind::tanh, activation_kind::relu})
      for (auto bn :
           {batch_norm_mode::none, batch_norm_mode::global, batch_norm_mode::local})
        for (bool clip_v : {true, false}) {
          CAPTURE(box);
          std::string act_name = to_string(act), bn_name = to_string(bn);
          CAPTURE(act_name);
          CAPTURE(bn_name);
          CAPTURE(clip_v);
          // A draw that puts a ReLU input within a finite-difference step of
          // zero makes every weight into that unit non-smooth (with local
          // batch norm, every weight of the layer): a degenerate sample, drawn
          // again (up to 5 draws) rather than judged. Tanh never needs it.
          for (int draw = 0;; ++draw) {
            auto spec = small_spec(box, act, bn);
            auto m = make_random_model(spec, rng);
            const size_t rows = 7;
            std::normal_distribution<double> normal(0.0, 1.0);
            std::uniform_real_distribution<double> u(-1.0, 1.0);
            std::vector<double> obs(rows * spec.obs_dim),
              box_actions(rows * spec.act_dim);
            std::vector<int64_t> actions(rows);
            std::vector<double> old_logp(rows), adv(rows), ret(rows), old_v(rows);
            for (auto& v : obs)
              v = normal(rng);
            for (auto& v : box_actions)
              v = normal(rng);
            for (auto& a : actions)
              a = static_cast<int64_t>(rng() % 3);
            for (size_t r = 0; r < rows; ++r) {
              adv[r] = normal(rng);
              ret[r] = normal(rng);
              old_v[r] = normal(rng) * 0.3;
            }
            // Old log-probabilities put ratios on both sides of the clip range.
            loss_workspace<double> ws;
            ppo_batch<double> batch;
            batch.rows = rows;
            batch.obs = obs.data();
            batch.discrete_actions = actions.data();
            batch.box_actions = box_actions.data();
            batch.old_logprob = old_logp.data();
            batch.advantages = adv.data();
            batch.returns = ret.data();
            batch.old_values = old_v.data();
            ppo_config config;
            config.clip_value_loss = clip_v;
            config.ent_coef = 0.05;
            train_options options;
            options.update_running_stats = false;
            std::vector<double> grad(m.params.size());
            auto buffers = m.buffers;
            ppo_loss_and_grad(spec, m.layout, m.params.data(), buffers.data(), batch,
                              config, options, ws, grad.data());
            // Ratios and value deltas on both sides of the clip range, kept 0.02
            // away from the kinks at 1 +- c, at +-c and where the clipped and
            // unclipped value errors are equal, so finite steps never cross one.
            const double c = config.clip_coef;
            auto near_kink = [&](double x, std::initializer_list<double> kinks) {
              for (double k : kinks)
                if (std::abs(x - k) < 0.02)
                  return true;
              return false;
            };
            for (size_t r = 0; r < rows; ++r) {
              // Rows 0 and 1 lie above and below the clip range, so that the
              // clipped branch is always exercised (drawing all 7 ratios at
              // random left every one inside it for about 1 run in 90).
              double ratio;
              do
                ratio = r == 0   ? 1 + c + 0.05 + 0.3 * (u(rng) + 1.0) / 2.0
                        : r == 1 ? 1 - c - 0.05 - 0.1 * (u(rng) + 1.0) / 2.0
                                 : 0.5 + 1.2 * (u(rng) + 1.0) / 2.0;
              while (near_kink(ratio, {1 - c, 1 + c}));
              old_logp[r] = ws.head.logp[r] - std::log(ratio);
              const double v = ws.critic.out[r];
              double delta, err, err_clipped;
              do {
                delta = u(rng) * 0.5;
                err = v - ret[r];
                err_clipped = v - delta + std::clamp(delta, -c, c) - ret[r];
              } while (near_kink(delta, {-c, c}) ||
                       (std::abs(delta) > c &&
                        std::abs(err * err - err_clipped * err_clipped) < 0.02));
              old_v[r] = v - delta;
            }
            auto report =
              ppo_loss_and_grad(spec, m.layout, m.params.data(), buffers.data(), batch,
                                config, options, ws, grad.data());
            CHECK(report.clip_fraction > 0.0);
            auto loss = [&](const std::vector<double>& p) {
              std::vector<double> scratch(p.size());
              loss_workspace<double> w;
              auto b = m.buffers;
              return ppo_loss_and_grad(spec, m.layout, p.data(), b.data(), batch, config,
                                       options, w, scratch.data())
                .loss;
            };
            auto checked = check_gradient(m.layout, m.params, grad, loss);
            if (act == activation_kind::relu &&
                checked.non_smooth * 50 > m.params.size() && draw < 4)
              continue;
            require_good(checked, m.params.size());
            break;
          }
        }
}

TEST_CASE("V-trace gradients match finite differences with the targets held fixed") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (bool box : {false, true})
    for (auto bn :
         {batch_norm_mode::none, batch_norm_mode::global, batch_norm_mode::local}) {
      CAPTURE(box);
      std::string mode_name = to_string(bn);
      CAPTURE(mode_name);
      auto spec = small_spec(box, activation_kind::tanh, bn);
      auto m = make_random_model(spec, rng);
      const size_t steps = 4, envs = 3, n = steps * envs;
      std::normal_distribution<double> normal(0.0, 1.0);
      std::uniform_real_distribution<double> u(0.0, 1.0);
      std::vector<double> obs((n + envs) * spec.obs_dim), box_actions(n * spec.act_dim);
      std::vector<int64_t> actions(n);
      std::vector<double> behavior(n), rewards(n), discounts(n);
      for (auto& v : obs)
        v = normal(rng);
      for (auto& v : box_actions)
        v = normal(rng);
      for (auto& a : actions)
        a = static_cast<int64_t>(rng() % 3);
      for (size_t i = 0; i < n; ++i) {
        rewards[i] = normal(rng);
        discounts[i] = u(rng) < 0.2 ? 0.0 : 0.99;
      }
      vtrace_batch<double> batch;
      batch.steps = steps;
      batch.envs = envs;
      batch.obs = obs.data();
      batch.discrete_actions = actions.data();
      batch.box_actions = box_actions.data();
      batch.behavior_logprob = behavior.data();
      batch.rewards = rewards.data();
      batch.discounts = discounts.data();
      vtrace_config config;
      config.ent_coef = 0.05;
      train_options options;
      options.update_running_stats = false;
      loss_workspace<double> ws;
      vtrace_targets_buffer<double> targets;
      std::vector<double> grad(m.params.size());
      auto buffers = m.buffers;
      vtrace_loss_and_grad(spec, m.layout, m.params.data(), buffers.data(), batch, config,
                           options, targets, ws, grad.data());
      // Behavior log-probabilities off the target policy, so rho and c clip.
      for (size_t i = 0; i < n; ++i)
        behavior[i] = ws.head.logp[i] + normal(rng) * 0.7;
      targets.fixed = false;
      vtrace_loss_and_grad(spec, m.layout, m.params.data(), buffers.data(), batch, config,
                           options, targets, ws, grad.data());
      targets.fixed = true;
      auto loss = [&](const std::vector<double>& p) {
        std::vector<double> scratch(p.size());
        loss_workspace<double> w;
        auto b = m.buffers;
        return vtrace_loss_and_grad(spec, m.layout, p.data(), b.data(), batch, config,
                                    options, targets, w, scratch.data())
          .loss;
      };
      require_good(check_gradient(m.layout, m.params, grad, loss), m.params.size());
    }
}

TEST_CASE("V-trace targets equal the paper's sum of discounted, trace-cut TD errors") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const size_t steps = 9, envs = 4, n = steps * envs;
  const auto in = random_vtrace_inputs(rng, steps, envs, 1.0);
  const auto &log_rhos = in.log_rhos, &discounts = in.discounts, &rewards = in.rewards,
             &values = in.values, &bootstrap = in.bootstrap;
  vtrace_config config;
  config.rho_bar = 0.9;
  config.pg_rho_bar = 1.2;
  config.c_bar = 0.8;
  std::vector<double> vs(n), adv(n);
  vtrace_targets(steps, envs, log_rhos.data(), discounts.data(), rewards.data(),
                 values.data(), bootstrap.data(), config, vs.data(), adv.data());
  auto value_at = [&](size_t t, size_t e) {
    return t < steps ? values[t * envs + e] : bootstrap[e];
  };
  // v_s = V(x_s) + sum_{t>=s} (prod_{i=s}^{t-1} gamma_i c_i) delta_t  (IMPALA, eq. 1).
  std::vector<double> expected(n);
  for (size_t e = 0; e < envs; ++e)
    for (size_t s = 0; s < steps; ++s) {
      double total = value_at(s, e);
      double weight = 1.0;
      for (size_t t = s; t < steps; ++t) {
        size_t i = t * envs + e;
        double rho = std::exp(log_rhos[i]);
        double delta = std::min(config.rho_bar, rho) *
                       (rewards[i] + discounts[i] * value_at(t + 1, e) - values[i]);
        total += weight * delta;
        weight *= discounts[i] * std::min(config.c_bar, rho);
      }
      expected[s * envs + e] = total;
    }
  for (size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    CHECK(vs[i] == doctest::Approx(expected[i]).epsilon(1e-12));
  }
  for (size_t e = 0; e < envs; ++e)
    for (size_t s = 0; s < steps; ++s) {
      size_t i = s * envs + e;
      double next = s + 1 < steps ? expected[i + envs] : bootstrap[e];
      double want = std::min(config.pg_rho_bar, std::exp(log_rhos[i])) *
                    (rewards[i] + discounts[i] * next - values[i]);
      CHECK(adv[i] == doctest::Approx(want).epsilon(1e-12));
    }
}

TEST_CASE("V-trace's policy trust region zeroes exactly the advantages that push a ratio "
          "further out of it") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const size_t steps = 16, envs = 8, n = steps * envs;
  const auto in = random_vtrace_inputs(rng, steps, envs, 1.0);
  const auto &log_rhos = in.log_rhos, &discounts = in.discounts, &rewards = in.rewards,
             &values = in.values, &bootstrap = in.bootstrap;
  vtrace_config plain;
  plain.pg_rho_bar = 0.5 + u(rng);
  vtrace_config clipped = plain;
  // At most 0.35, so that rows past either bound are many (about 20 each).
  clipped.policy_clip = 0.05 + 0.3 * u(rng);
  CAPTURE(clipped.policy_clip);
  std::vector<double> vs0(n), adv0(n), vs1(n), adv1(n);
  vtrace_targets(steps, envs, log_rhos.data(), discounts.data(), rewards.data(),
                 values.data(), bootstrap.data(), plain, vs0.data(), adv0.data());
  vtrace_targets(steps, envs, log_rhos.data(), discounts.data(), rewards.data(),
                 values.data(), bootstrap.data(), clipped, vs1.data(), adv1.data());
  size_t above = 0, below = 0, kept_outside = 0;
  for (size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    // The value targets do not depend on the trust region.
    CHECK(vs1[i] == vs0[i]);
    const double ratio = std::exp(log_rhos[i]);
    const bool too_high = adv0[i] > 0 && ratio > 1 + clipped.policy_clip;
    const bool too_low = adv0[i] < 0 && ratio < 1 - clipped.policy_clip;
    above += too_high;
    below += too_low;
    const bool outside =
      ratio > 1 + clipped.policy_clip || ratio < 1 - clipped.policy_clip;
    kept_outside += outside && !too_high && !too_low;
    // PPO's clipped surrogate: no gradient where the ratio already passed
    // the bound its advantage pushes towards; everywhere else V-trace's.
    CHECK(adv1[i] == (too_high || too_low ? 0.0 : adv0[i]));
  }
  // Each kind of row occurred, so each branch was compared.
  CHECK(above > 0);
  CHECK(below > 0);
  CHECK(kept_outside > 0);
}

TEST_CASE("the float32 PPO gradient agrees with the float64 one within 1e-5 per tensor") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (auto bn : {batch_norm_mode::none, batch_norm_mode::global, batch_norm_mode::local})
    for (bool box : {false, true}) {
      std::string mode_name = to_string(bn);
      CAPTURE(mode_name);
      CAPTURE(box);
      model_spec spec = small_spec(box, activation_kind::tanh, bn);
      spec.hidden = {64, 64};
      actor_critic model(spec, rng());
      auto layout = model.layout();
      const size_t rows = 256;
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> obs(rows * spec.obs_dim), box_actions(rows * spec.act_dim);
      std::vector<int64_t> actions(rows);
      std::vector<float> old_logp(rows), adv(rows), ret(rows), old_v(rows);
      for (auto& v : obs)
        v = normal(rng);
      for (auto& v : box_actions)
        v = normal(rng);
      for (auto& a : actions)
        a = static_cast<int64_t>(rng() % 3);
      for (size_t r = 0; r < rows; ++r) {
        adv[r] = normal(rng);
        ret[r] = normal(rng);
        old_v[r] = normal(rng);
        old_logp[r] = (box ? -2.0f : -1.1f) + 0.1f * normal(rng);
      }
      auto widen = [](const auto& v) { return std::vector<double>(v.begin(), v.end()); };
      auto obs64 = widen(obs), box64 = widen(box_actions), old_logp64 = widen(old_logp),
           adv64 = widen(adv), ret64 = widen(ret), old_v64 = widen(old_v);
      std::vector<double> params64(model.params(), model.params() + model.param_count());
      std::vector<double> buffers64(model.buffers(),
                                    model.buffers() + model.buffer_count());
      ppo_batch<float> b32{
        rows,       obs.data(), actions.data(), box_actions.data(), old_logp.data(),
        adv.data(), ret.data(), old_v.data()};
      ppo_batch<double> b64{rows,         obs64.data(),      actions.data(),
                            box64.data(), old_logp64.data(), adv64.data(),
                            ret64.data(), old_v64.data()};
      train_options options;
      options.update_running_stats = false;
      loss_workspace<float> w32;
      loss_workspace<double> w64;
      std::vector<float> g32(model.param_count());
      std::vector<double> g64(model.param_count());
      auto r32 = ppo_loss_and_grad(spec, layout, model.params(), model.buffers(), b32,
                                   ppo_config{}, options, w32, g32.data());
      auto r64 = ppo_loss_and_grad(spec, layout, params64.data(), buffers64.data(), b64,
                                   ppo_config{}, options, w64, g64.data());
      CHECK(r32.loss == doctest::Approx(r64.loss).epsilon(1e-5));
      // Tensors whose exact gradient is zero (biases feeding a local batch
      // norm) or a batch sum that nearly cancels (actor_logstd under random
      // actions) are held to a floor relative to the whole gradient's norm:
      // a float32 sum's rounding error scales with its terms, not with the
      // small result (seed 1363972541794182998 missed a 1e-2 floor by 10%).
      double total = 0;
      for (auto g : g64)
        total += g * g;
      for (const auto& t : layout.tensors) {
        if (t.is_buffer)
          continue;
        CAPTURE(t.name);
        double diff = 0, norm = 0;
        for (size_t i = t.offset; i < t.offset + t.size; ++i) {
          diff += (g32[i] - g64[i]) * (g32[i] - g64[i]);
          norm += g64[i] * g64[i];
        }
        CHECK(std::sqrt(diff) <=
              1e-5 * std::max(std::sqrt(norm), 5e-2 * std::sqrt(total)));
      }
    }
}

TEST_CASE("global batch norm reports the batch moments of each layer's input and local "
          "batch norm moves its running statistics like PyTorch") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (auto bn : {batch_norm_mode::global, batch_norm_mode::local}) {
    std::string mode_name = to_string(bn);
    CAPTURE(mode_name);
    auto spec = small_spec(false, activation_kind::tanh, bn);
    auto m = make_random_model(spec, rng);
    const size_t rows = 9;
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> obs(rows * spec.obs_dim), zeros(rows), ones(rows, 1.0);
    std::vector<int64_t> actions(rows, 1);
    for (auto& v : obs)
      v = normal(rng);
    ppo_batch<double> batch{rows,         obs.data(),  actions.data(), nullptr,
                            zeros.data(), ones.data(), ones.data(),    zeros.data()};
    std::vector<troupe::kernels::moments> deltas;
    train_options options;
    options.batch_moments = &deltas;
    loss_workspace<double> ws;
    std::vector<double> grad(m.params.size());
    auto buffers = m.buffers;
    ppo_loss_and_grad(spec, m.layout, m.params.data(), buffers.data(), batch,
                      ppo_config{}, options, ws, grad.data());
    REQUIRE(deltas.size() == 4);
    // The first actor layer's input is obs W^T + b; recompute it directly.
    const auto& lin = m.layout.actor.hidden[0].linear;
    for (int64_t j = 0; j < lin.out; ++j) {
      double sum = 0, sq = 0;
      std::vector<double> z(rows);
      for (size_t r = 0; r < rows; ++r) {
        z[r] = m.params[lin.bias + j];
        for (int64_t i = 0; i < lin.in; ++i)
          z[r] += m.params[lin.weight + j * lin.in + i] * obs[r * lin.in + i];
        sum += z[r];
      }
      double mean = sum / rows;
      for (auto v : z)
        sq += (v - mean) * (v - mean);
      CHECK(deltas[0].count == rows);
      CHECK(deltas[0].mean[j] == doctest::Approx(mean).epsilon(1e-12));
      CHECK(deltas[0].m2[j] == doctest::Approx(sq).epsilon(1e-10));
      const auto& slot = m.layout.actor.hidden[0].batch_norm;
      if (bn == batch_norm_mode::local) {
        double m0 = m.buffers[slot.running_mean + j],
               v0 = m.buffers[slot.running_var + j];
        CHECK(buffers[slot.running_mean + j] == doctest::Approx(0.9 * m0 + 0.1 * mean));
        CHECK(buffers[slot.running_var + j] ==
              doctest::Approx(0.9 * v0 + 0.1 * sq / (rows - 1)));
      } else {
        CHECK(buffers[slot.running_mean + j] == m.buffers[slot.running_mean + j]);
      }
    }
  }
}

TEST_CASE(
  "normalize_advantages matches a float64 reference and leaves one row unchanged") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(3.0, 5.0);
  const size_t rows = 1 + rng() % 300;
  CAPTURE(rows);
  std::vector<float> in(rows);
  for (auto& a : in)
    a = static_cast<float>(normal(rng));
  std::vector<float> out(rows);
  normalize_advantages(in.data(), rows, out.data());
  if (rows == 1) {
    CHECK(out[0] == in[0]);
    return;
  }
  // Written out in long double, independently of the code under test.
  long double mean = 0, ss = 0;
  for (float a : in)
    mean += a;
  mean /= rows;
  for (float a : in)
    ss += (a - mean) * (a - mean);
  const long double std = std::sqrt(ss / (rows - 1));
  for (size_t r = 0; r < rows; ++r) {
    const double expected = static_cast<double>((in[r] - mean) / (std + 1e-8L));
    CHECK(out[r] == doctest::Approx(expected).epsilon(1e-6));
  }
  float single = 7.5f, single_out = 0;
  normalize_advantages(&single, 1, &single_out);
  CHECK(single_out == 7.5f);
}

// The actor's and the critic's shares of PPO's loss, each on its own
// workspace, write exactly their own network's tensors with exactly the
// numbers of the whole evaluation, and their reports join into its report.
template <class T>
void check_ppo_parts(bool box, std::mt19937_64& rng) {
  model_spec spec = small_spec(box, activation_kind::tanh, batch_norm_mode::none);
  spec.hidden = {1 + static_cast<int64_t>(rng() % 40),
                 1 + static_cast<int64_t>(rng() % 40)};
  actor_critic model(spec, rng());
  const auto& layout = model.layout();
  const size_t rows = 1 + rng() % 300;
  CAPTURE(rows);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<T> obs(rows * spec.obs_dim), box_actions(rows * spec.act_dim);
  std::vector<int64_t> actions(rows);
  std::vector<T> old_logp(rows), adv(rows), ret(rows), old_v(rows);
  for (auto& v : obs)
    v = static_cast<T>(normal(rng));
  for (auto& v : box_actions)
    v = static_cast<T>(normal(rng));
  for (auto& a : actions)
    a = static_cast<int64_t>(rng() % 3);
  for (size_t r = 0; r < rows; ++r) {
    adv[r] = static_cast<T>(normal(rng));
    ret[r] = static_cast<T>(normal(rng));
    old_v[r] = static_cast<T>(normal(rng));
    old_logp[r] = static_cast<T>((box ? -2.0 : -1.1) + 0.3 * normal(rng));
  }
  std::vector<T> params(model.params(), model.params() + model.param_count());
  std::vector<T> buffers(model.buffers(), model.buffers() + model.buffer_count());
  ppo_batch<T> batch{
    rows,       obs.data(), actions.data(), box_actions.data(), old_logp.data(),
    adv.data(), ret.data(), old_v.data()};
  ppo_config config;
  config.ent_coef = 0.01 * static_cast<double>(rng() % 3);
  config.clip_value_loss = rng() % 2 == 0;
  config.normalize_advantages = rng() % 2 == 0;
  train_options options;
  const T sentinel = static_cast<T>(12345.0);
  std::vector<T> whole(model.param_count(), sentinel), actor(whole), critic(whole);
  loss_workspace<T> w_whole, w_actor, w_critic;
  auto r = ppo_loss_and_grad(spec, layout, params.data(), buffers.data(), batch, config,
                             options, w_whole, whole.data());
  auto ra = ppo_loss_and_grad(spec, layout, params.data(), buffers.data(), batch, config,
                              options, w_actor, actor.data(), ppo_part::actor);
  auto rc = ppo_loss_and_grad(spec, layout, params.data(), buffers.data(), batch, config,
                              options, w_critic, critic.data(), ppo_part::critic);
  auto joined = ppo_merge_parts(ra, rc, config);
  CHECK(joined.loss == r.loss);
  CHECK(joined.policy_loss == r.policy_loss);
  CHECK(joined.value_loss == r.value_loss);
  CHECK(joined.entropy == r.entropy);
  CHECK(joined.approx_kl == r.approx_kl);
  CHECK(joined.clip_fraction == r.clip_fraction);
  CHECK(ra.value_loss == 0);
  CHECK(rc.policy_loss == 0);
  CHECK(rc.entropy == 0);
  for (const auto& t : layout.tensors) {
    if (t.is_buffer)
      continue;
    CAPTURE(t.name);
    const bool of_critic = t.name.rfind("critic", 0) == 0;
    const auto& mine = of_critic ? critic : actor;
    const auto& other = of_critic ? actor : critic;
    size_t wrong = 0, touched = 0;
    for (size_t i = t.offset; i < t.offset + t.size; ++i) {
      wrong += !(mine[i] == whole[i]);
      touched += !(other[i] == sentinel);
    }
    CHECK(wrong == 0);
    CHECK(touched == 0);
  }
}

TEST_CASE("the actor's and the critic's shares of PPO's loss write their own tensors "
          "with the whole evaluation's numbers, in float32 and float64") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (int round = 0; round < 10; ++round)
    for (bool box : {false, true}) {
      CAPTURE(round);
      CAPTURE(box);
      check_ppo_parts<float>(box, rng);
      check_ppo_parts<double>(box, rng);
    }
}
