#include "learners/backend.hpp"
#include "learners/cuda_plugin.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <tuple>

#include <doctest/doctest.h>

#include "tests/skip.hpp"
#include "tests/seed.hpp"

using namespace troupe::learners;
using troupe::test::fresh_seed;

namespace {

// Why the CUDA cases cannot run here (no CUDA build, no driver, no GPU), or
// empty where they can. A driver that finds a GPU while the plugin does not
// load fails the case instead of skipping it.
std::string cuda_missing() {
  auto& loader = process_cuda_loader();
  if (const auto probe = loader.probe_driver(); probe.devices <= 0)
    return probe.reason;
  if (auto entry = loader.plugin(); !entry)
    FAIL("the NVIDIA driver finds a GPU but " << entry.err().message);
  auto gpus = loader.usable_gpus();
  return gpus ? std::string() : gpus.err().message;
}

struct host_batch {
  std::vector<float> obs, box_actions, old_logp, adv, ret, old_v;
  std::vector<int64_t> actions;

  host_batch(const model_spec& spec, size_t rows, std::mt19937_64& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    obs.resize(rows * spec.obs_dim);
    box_actions.resize(rows * spec.act_dim);
    for (auto& v : obs)
      v = normal(rng);
    for (auto& v : box_actions)
      v = normal(rng);
    actions.resize(rows);
    for (auto& a : actions)
      a = static_cast<int64_t>(rng() % 3);
    for (size_t r = 0; r < rows; ++r) {
      old_logp.push_back((spec.action == action_kind::box ? -2.0f : -1.1f) +
                         0.2f * normal(rng));
      adv.push_back(normal(rng));
      ret.push_back(normal(rng));
      old_v.push_back(normal(rng));
    }
  }

  ppo_batch<float> view() const {
    return {actions.size(),  obs.data(), actions.data(), box_actions.data(),
            old_logp.data(), adv.data(), ret.data(),     old_v.data()};
  }

  ppo_batch<double> view64(std::vector<std::vector<double>>& keep) const {
    auto widen = [&](const std::vector<float>& v) {
      keep.emplace_back(v.begin(), v.end());
      return keep.back().data();
    };
    keep.reserve(6);
    ppo_batch<double> b;
    b.rows = actions.size();
    b.obs = widen(obs);
    b.discrete_actions = actions.data();
    b.box_actions = widen(box_actions);
    b.old_logprob = widen(old_logp);
    b.advantages = widen(adv);
    b.returns = widen(ret);
    b.old_values = widen(old_v);
    return b;
  }
};

// A model of obs_dim inputs and `hidden` layers: a box head of 2 actions, or
// a discrete one of 3 (host_batch draws actions in [0, 3)).
model_spec parity_spec(int64_t obs_dim, std::vector<int64_t> hidden, bool box,
                       batch_norm_mode bn = batch_norm_mode::none) {
  model_spec spec;
  spec.obs_dim = obs_dim;
  spec.hidden = std::move(hidden);
  spec.batch_norm = bn;
  if (box) {
    spec.action = action_kind::box;
    spec.act_dim = 2;
  } else {
    spec.n = 3;
  }
  return spec;
}

// The largest |a[i] - b[i]|.
template <class A, class B>
double max_abs_diff(const std::vector<A>& a, const std::vector<B>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst =
      std::max(worst, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return worst;
}

double normwise(const std::vector<float>& a, const std::vector<double>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return std::sqrt(diff / norm);
}

} // namespace

using backend_factory =
  std::function<std::unique_ptr<learner_backend>(const model_spec&, const adam_config&)>;

// Gradient, loss, batch-norm moments and one clipped Adam step of `make`'s
// backend against the float64 reference, for every batch norm mode and head.
void check_against_float64(const backend_factory& make) {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (auto bn : {batch_norm_mode::none, batch_norm_mode::global, batch_norm_mode::local})
    for (bool box : {false, true}) {
      std::string bn_name = to_string(bn);
      CAPTURE(bn_name);
      CAPTURE(box);
      const model_spec spec = parity_spec(6, {32, 32}, box, bn);
      actor_critic model(spec, rng());
      adam_config adam;
      auto backend = make(spec, adam);
      REQUIRE(backend->load(model.params(), model.buffers()));
      const size_t rows = 1000;
      host_batch data(spec, rows, rng);
      auto report = backend->ppo_gradient(data.view(), ppo_config{});
      REQUIRE(report);

      std::vector<std::vector<double>> keep;
      auto b64 = data.view64(keep);
      std::vector<double> p64(model.params(), model.params() + model.param_count());
      std::vector<double> buf64(model.buffers(), model.buffers() + model.buffer_count());
      std::vector<double> g64(p64.size());
      std::vector<troupe::kernels::moments> moments64;
      train_options topts;
      topts.batch_moments = &moments64;
      loss_workspace<double> ws;
      auto ref = ppo_loss_and_grad(spec, model.layout(), p64.data(), buf64.data(), b64,
                                   ppo_config{}, topts, ws, g64.data());
      CHECK(report->loss == doctest::Approx(ref.loss).epsilon(1e-5));
      std::vector<float> grad(model.param_count());
      REQUIRE(backend->read_gradient(grad.data()));
      CHECK(normwise(grad, g64) <= 1e-5);

      const auto& moments = backend->batch_moments();
      REQUIRE(moments.size() == moments64.size());
      for (size_t l = 0; l < moments.size(); ++l) {
        CHECK(moments[l].count == rows);
        for (size_t j = 0; j < moments[l].dim(); ++j) {
          CHECK(moments[l].mean[j] ==
                doctest::Approx(moments64[l].mean[j]).epsilon(1e-5).scale(1));
          CHECK(moments[l].m2[j] == doctest::Approx(moments64[l].m2[j]).epsilon(1e-5));
        }
      }

      // One clipped Adam step, against the float64 formulas.
      auto norm = backend->apply_gradient(1e-3, 0.5);
      REQUIRE(norm);
      double norm64 = 0;
      for (auto g : g64)
        norm64 += g * g;
      norm64 = std::sqrt(norm64);
      CHECK(*norm == doctest::Approx(norm64).epsilon(1e-5));
      double coef = std::min(1.0, 0.5 / (norm64 + 1e-6));
      std::vector<float> params(model.param_count()), buffers(model.buffer_count());
      REQUIRE(backend->store(params.data(), buffers.data()));
      std::vector<double> expected(p64.size());
      for (size_t i = 0; i < p64.size(); ++i) {
        double g = g64[i] * coef;
        double m = (1 - adam.beta1) * g, v = (1 - adam.beta2) * g * g;
        double step = 1e-3 / (1 - adam.beta1);
        expected[i] =
          p64[i] - step * m / (std::sqrt(v) / std::sqrt(1 - adam.beta2) + adam.eps);
      }
      // Adam moves every parameter by about lr: compare the moves.
      CHECK(max_abs_diff(params, expected) <= 1e-3 * 0.02);
      if (bn == batch_norm_mode::local) {
        const auto& slot = model.layout().actor.hidden[0].batch_norm;
        CHECK(buffers[slot.running_mean] ==
              doctest::Approx(buf64[slot.running_mean]).epsilon(1e-5));
      }
    }
}

TEST_CASE("the CPU backend's sharded gradient, moments and Adam step match a float64 "
          "reference on the whole batch") {
  check_against_float64([](const model_spec& spec, const adam_config& adam) {
    backend_options options;
    options.threads = 3;
    return make_cpu_backend(spec, adam, options);
  });
}

TEST_CASE(
  "the CUDA backend's gradient, moments and Adam step match a float64 reference") {
  if (const std::string why = cuda_missing(); !why.empty()) {
    model_spec spec;
    spec.obs_dim = 3;
    spec.n = 2;
    auto missing = make_cuda_backend(spec, adam_config{});
    REQUIRE_FALSE(missing);
    CHECK(missing.err().code == troupe::errc::unavailable);
    TROUPE_SKIP("CUDA backend parity (" + why +
                "); only the 'unavailable' error was checked");
  }
  check_against_float64([](const model_spec& spec, const adam_config& adam) {
    auto backend = make_cuda_backend(spec, adam);
    REQUIRE(backend);
    return std::move(*backend);
  });
}

TEST_CASE(
  "device auto picks the CPU without a GPU and says why, and cuda without one fails") {
  auto cpu = choose_device("cpu");
  REQUIRE(cpu);
  CHECK(cpu->kind == device_kind::cpu);
  auto automatic = choose_device("auto");
  REQUIRE(automatic);
  CHECK_FALSE(automatic->reason.empty());
  if (auto gpus = process_cuda_loader().usable_gpus(); !gpus) {
    // The reason is the loader's: no driver, no GPU, no plugin, no CUDA build.
    const std::string why = gpus.err().message;
    CAPTURE(why);
    CHECK(automatic->kind == device_kind::cpu);
    CHECK(automatic->reason.find(why) != std::string::npos);
    auto cuda = choose_device("cuda");
    REQUIRE_FALSE(cuda);
    CHECK(cuda.err().code == troupe::errc::unavailable);
    CHECK(cuda.err().message.find(why) != std::string::npos);
  } else {
    CHECK(automatic->kind == device_kind::cuda);
  }
  auto bad = choose_device("tpu");
  REQUIRE_FALSE(bad);
  CHECK(bad.err().message.find("\"tpu\"") != std::string::npos);
}

TEST_CASE("a backend refuses an empty batch") {
  model_spec spec;
  spec.obs_dim = 3;
  spec.n = 2;
  auto backend = make_cpu_backend(spec, adam_config{});
  ppo_batch<float> empty;
  CHECK_FALSE(backend->ppo_gradient(empty, ppo_config{}));
}

TEST_CASE("a backend refuses action indices outside the action space, naming the row") {
  std::mt19937_64 rng(fresh_seed());
  model_spec spec;
  spec.obs_dim = 6;
  spec.n = 3;
  spec.hidden = {8};
  auto backend = make_cpu_backend(spec, adam_config{});
  host_batch data(spec, 20, rng);
  data.actions[7] = 3;
  auto bad = backend->ppo_gradient(data.view(), ppo_config{});
  REQUIRE_FALSE(bad);
  CHECK(bad.err().message.find("row 7") != std::string::npos);
  data.actions[7] = -1;
  CHECK_FALSE(backend->ppo_gradient(data.view(), ppo_config{}));
  data.actions[7] = 2;
  CHECK(backend->ppo_gradient(data.view(), ppo_config{}));
}

namespace {

// V-trace loss, gradient and moments of `make`'s backend against the float64
// reference, for every batch norm mode and head.
void check_vtrace_against_float64(const backend_factory& make) {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (auto bn : {batch_norm_mode::none, batch_norm_mode::global, batch_norm_mode::local})
    for (bool box : {false, true}) {
      std::string bn_name = to_string(bn);
      CAPTURE(bn_name);
      CAPTURE(box);
      const model_spec spec = parity_spec(5, {32, 16}, box, bn);
      actor_critic model(spec, rng());
      auto backend = make(spec, adam_config{});
      REQUIRE(backend->load(model.params(), model.buffers()));
      const size_t steps = 16, envs = 8, n = steps * envs;
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      std::vector<float> obs((n + envs) * spec.obs_dim), acts(n * spec.act_dim);
      std::vector<float> behavior(n), rewards(n), discounts(n);
      std::vector<int64_t> actions(n);
      for (auto& v : obs)
        v = normal(rng);
      for (auto& v : acts)
        v = normal(rng);
      for (auto& a : actions)
        a = static_cast<int64_t>(rng() % 3);
      for (size_t i = 0; i < n; ++i) {
        behavior[i] = (box ? -2.0f : -1.1f) + 0.5f * normal(rng);
        rewards[i] = normal(rng);
        discounts[i] = u(rng) < 0.1f ? 0.0f : 0.99f;
      }
      vtrace_batch<float> b32{
        steps,           envs,           obs.data(),      actions.data(), acts.data(),
        behavior.data(), rewards.data(), discounts.data()};
      auto report = backend->vtrace_gradient(b32, vtrace_config{});
      REQUIRE(report);
      auto widen = [](const std::vector<float>& v) {
        return std::vector<double>(v.begin(), v.end());
      };
      auto obs64 = widen(obs), acts64 = widen(acts), beh64 = widen(behavior),
           rew64 = widen(rewards), disc64 = widen(discounts);
      vtrace_batch<double> b64{steps,         envs,         obs64.data(), actions.data(),
                               acts64.data(), beh64.data(), rew64.data(), disc64.data()};
      std::vector<double> p64(model.params(), model.params() + model.param_count());
      std::vector<double> buf64(model.buffers(), model.buffers() + model.buffer_count());
      std::vector<double> g64(p64.size());
      std::vector<troupe::kernels::moments> moments64;
      train_options options;
      options.batch_moments = &moments64;
      loss_workspace<double> ws;
      vtrace_targets_buffer<double> targets;
      auto ref = vtrace_loss_and_grad(spec, model.layout(), p64.data(), buf64.data(), b64,
                                      vtrace_config{}, options, targets, ws, g64.data());
      CHECK(report->loss == doctest::Approx(ref.loss).epsilon(1e-5));
      std::vector<float> grad(model.param_count());
      REQUIRE(backend->read_gradient(grad.data()));
      CHECK(normwise(grad, g64) <= 1e-5);
      REQUIRE(backend->batch_moments().size() == moments64.size());
      for (size_t l = 0; l < moments64.size(); ++l)
        CHECK(backend->batch_moments()[l].count == n + envs);
    }
}

} // namespace

TEST_CASE("the CPU backend's V-trace loss and gradient match a float64 reference") {
  check_vtrace_against_float64([](const model_spec& spec, const adam_config& adam) {
    return make_cpu_backend(spec, adam);
  });
}

TEST_CASE("the CUDA backend's V-trace loss and gradient match a float64 reference") {
  if (const std::string why = cuda_missing(); !why.empty()) {
    TROUPE_SKIP("CUDA backend V-trace parity (" + why + ")");
  }
  check_vtrace_against_float64([](const model_spec& spec, const adam_config& adam) {
    auto backend = make_cuda_backend(spec, adam);
    REQUIRE(backend);
    return std::move(*backend);
  });
}

TEST_CASE("a backend in global batch norm mode normalizes with the statistics its views "
          "publish") {
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  model_spec spec;
  spec.obs_dim = 4;
  spec.n = 3;
  spec.hidden = {8, 6};
  spec.batch_norm = batch_norm_mode::global;
  actor_critic model(spec, rng());
  auto backend = make_cpu_backend(spec, adam_config{});
  REQUIRE(backend->load(model.params(), model.buffers()));
  auto layers = model.batch_norm_layers();
  std::vector<std::unique_ptr<stats_view>> owned;
  std::vector<stats_view*> views;
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (const auto& layer : layers) {
    owned.push_back(std::make_unique<stats_view>(layer.width, layer.prefix));
    std::vector<double> mean(layer.width), var(layer.width);
    for (int64_t j = 0; j < layer.width; ++j) {
      mean[j] = u(rng);
      var[j] = 0.5 + std::abs(u(rng));
    }
    REQUIRE(owned.back()->publish(3, 1000, mean.data(), var.data(), layer.width).ok());
    views.push_back(owned.back().get());
  }
  REQUIRE(backend->read_global_stats(views));
  REQUIRE(model.read_global_stats(views));
  host_batch data(spec, 300, rng);
  auto report = backend->ppo_gradient(data.view(), ppo_config{});
  REQUIRE(report);
  std::vector<std::vector<double>> keep;
  auto b64 = data.view64(keep);
  std::vector<double> p64(model.params(), model.params() + model.param_count());
  std::vector<double> buf64(model.buffers(), model.buffers() + model.buffer_count());
  std::vector<double> g64(p64.size());
  loss_workspace<double> ws;
  ppo_loss_and_grad(spec, model.layout(), p64.data(), buf64.data(), b64, ppo_config{},
                    train_options{}, ws, g64.data());
  std::vector<float> grad(model.param_count());
  REQUIRE(backend->read_gradient(grad.data()));
  CHECK(normwise(grad, g64) <= 1e-5);
  // The statistics came from the views, not from the initial running statistics.
  CHECK(buf64[layers[0].running_var] != 1.0);
  std::vector<stats_view*> too_few(views.begin(), views.end() - 1);
  CHECK_FALSE(backend->read_global_stats(too_few));
}

TEST_CASE("the CPU backend applies no gradient that holds a NaN, and its optimizer state "
          "goes out and comes back exactly") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  model_spec spec;
  spec.obs_dim = 5;
  spec.n = 3;
  spec.hidden = {8, 8};
  actor_critic model(spec, seed);
  const size_t n = model.param_count();
  auto backend = make_cpu_backend(spec, adam_config{});
  REQUIRE(backend->load(model.params(), model.buffers()));
  auto params = [&] {
    std::vector<float> p(n), b(model.buffer_count());
    REQUIRE(backend->store(p.data(), b.data()));
    return p;
  };
  auto optimizer = [&] {
    std::vector<float> m(n), v(n);
    int64_t steps = -1;
    REQUIRE(backend->read_optimizer(m.data(), v.data(), &steps));
    return std::make_tuple(m, v, steps);
  };
  ppo_config loss;
  loss.normalize_advantages = false;
  host_batch data(spec, 16, rng);
  data.obs[rng() % data.obs.size()] = std::nanf("");
  REQUIRE(backend->ppo_gradient(data.view(), loss));
  const auto before = params();
  auto norm = backend->apply_gradient(1e-2, 0.5);
  REQUIRE(norm);
  CHECK_FALSE(std::isfinite(*norm));
  CHECK(params() == before);
  CHECK(std::get<2>(optimizer()) == 0);

  host_batch good(spec, 16, rng);
  REQUIRE(backend->ppo_gradient(good.view(), loss));
  norm = backend->apply_gradient(1e-2, 0.5);
  REQUIRE(norm);
  CHECK(std::isfinite(*norm));
  CHECK(params() != before);
  std::vector<float> m, v;
  int64_t steps = 0;
  std::tie(m, v, steps) = optimizer();
  CHECK(steps == 1);
  // Written into another backend, the state comes back bit for bit, and the
  // next step of both is the same.
  auto other = make_cpu_backend(spec, adam_config{});
  const auto now = params();
  REQUIRE(other->load(now.data(), model.buffers()));
  REQUIRE(other->write_optimizer(m.data(), v.data(), steps));
  std::vector<float> m2(n), v2(n);
  int64_t steps2 = 0;
  REQUIRE(other->read_optimizer(m2.data(), v2.data(), &steps2));
  CHECK(m2 == m);
  CHECK(v2 == v);
  CHECK(steps2 == steps);
  host_batch next(spec, 16, rng);
  for (auto* b : {backend.get(), other.get()}) {
    REQUIRE(b->ppo_gradient(next.view(), loss));
    REQUIRE(b->apply_gradient(1e-2, 0.5));
  }
  std::vector<float> p2(n), b2(model.buffer_count());
  REQUIRE(other->store(p2.data(), b2.data()));
  CHECK(p2 == params());
}

namespace {

// A whole-update request over `data` with `epochs` random permutations.
struct update_input {
  std::vector<uint32_t> order;
  ppo_update_request request;

  update_input(const host_batch& data, size_t epochs, size_t minibatches,
               std::mt19937_64& rng) {
    const size_t rows = data.old_logp.size();
    for (size_t e = 0; e < epochs; ++e) {
      std::vector<uint32_t> perm(rows);
      for (size_t i = 0; i < rows; ++i)
        perm[i] = static_cast<uint32_t>(i);
      std::shuffle(perm.begin(), perm.end(), rng);
      order.insert(order.end(), perm.begin(), perm.end());
    }
    request.batch = data.view();
    request.order = order.data();
    request.epochs = epochs;
    request.minibatches = minibatches;
    request.lr = 3e-3;
    request.max_grad_norm = 0.5;
  }
};

std::vector<float> params_of(learner_backend& b, const actor_critic& model) {
  std::vector<float> params(model.param_count()), buffers(model.buffer_count() + 1);
  REQUIRE(b.store(params.data(), buffers.data()));
  return params;
}

} // namespace

TEST_CASE("a whole PPO update is refused with a message naming the broken rule") {
  std::mt19937_64 rng(fresh_seed());
  model_spec spec;
  spec.obs_dim = 4;
  spec.n = 3;
  spec.hidden = {8};
  auto backend = make_cpu_backend(spec, adam_config{});
  host_batch data(spec, 10, rng);
  auto refused = [&](update_input& in, const std::string& part) {
    auto r = backend->ppo_update(in.request, ppo_config{});
    REQUIRE_FALSE(r);
    CHECK_MESSAGE(r.err().message.find(part) != std::string::npos, r.err().message);
  };
  {
    update_input in(data, 2, 3, rng);
    in.order[13] = 10;
    refused(in, "entry 13 (epoch 1)");
  }
  {
    update_input in(data, 1, 11, rng);
    refused(in, "minibatches <= 10, got 11");
  }
  {
    update_input in(data, 1, 2, rng);
    in.request.epochs = 0;
    refused(in, "epochs >= 1");
  }
  {
    update_input in(data, 1, 2, rng);
    data.actions[4] = 7;
    refused(in, "row 4");
    data.actions[4] = 1;
  }
  {
    update_input in(data, 1, 2, rng);
    in.request.lr = std::nan("");
    refused(in, "learning rate");
  }
  model_spec bn = spec;
  bn.batch_norm = batch_norm_mode::global;
  auto with_bn = make_cpu_backend(bn, adam_config{});
  update_input in(data, 1, 2, rng);
  auto r = with_bn->ppo_update(in.request, ppo_config{});
  REQUIRE_FALSE(r);
  CHECK(r.err().message.find("batch norm") != std::string::npos);
  // Nothing was applied by any refused update.
  const actor_critic model(spec, 1);
  std::vector<float> m(model.param_count()), v(m.size());
  int64_t steps = -1;
  REQUIRE(backend->read_optimizer(m.data(), v.data(), &steps));
  CHECK(steps == 0);
}

TEST_CASE("the CUDA backend's whole update, eager, captured and replayed, matches its "
          "minibatch-by-minibatch steps") {
  if (const std::string why = cuda_missing(); !why.empty())
    TROUPE_SKIP("CUDA whole-update parity (" + why + ")");
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (bool box : {false, true}) {
    CAPTURE(box);
    const model_spec spec = parity_spec(5, {32, 16}, box);
    actor_critic model(spec, rng());
    adam_config adam;
    auto fused = make_cuda_backend(spec, adam);
    auto stepwise = make_cuda_backend(spec, adam);
    REQUIRE(fused);
    REQUIRE(stepwise);
    REQUIRE((*fused)->fuses_updates());
    REQUIRE((*fused)->load(model.params(), model.buffers()));
    REQUIRE((*stepwise)->load(model.params(), model.buffers()));
    const size_t rows = 103, epochs = 2, mbs = 4;
    for (int call = 0; call < 4; ++call) {
      CAPTURE(call);
      host_batch data(spec, rows, rng);
      // A NaN observation makes its minibatch's gradient non-finite (a NaN
      // advantage would not: the clipped surrogate's min and max drop it).
      if (call == 3)
        data.obs[37 * static_cast<size_t>(spec.obs_dim)] = std::nan("");
      update_input in(data, epochs, mbs, rng);
      auto a = (*fused)->ppo_update(in.request, ppo_config{});
      auto b = ppo_update_stepwise(**stepwise, spec, in.request, ppo_config{});
      REQUIRE(a);
      REQUIRE(b);
      CHECK(a->graph_error.empty());
      CHECK(a->graphed == (call >= 1)); // the first run of a shape sizes the buffers
      REQUIRE(a->losses.size() == epochs * mbs);
      REQUIRE(a->norms.size() == epochs * mbs);
      CHECK(a->taken == b->taken);
      CHECK(a->rejected == b->rejected);
      CHECK(a->rejected == (call == 3 ? epochs : 0));
      for (size_t k = 0; k < a->losses.size(); ++k) {
        CAPTURE(k);
        if (!std::isfinite(b->norms[k])) {
          CHECK_FALSE(std::isfinite(a->norms[k]));
          continue;
        }
        CHECK(a->norms[k] == doctest::Approx(b->norms[k]).epsilon(1e-4));
        CHECK(a->losses[k].loss == doctest::Approx(b->losses[k].loss).epsilon(1e-4));
        CHECK(a->losses[k].approx_kl ==
              doctest::Approx(b->losses[k].approx_kl).epsilon(1e-3).scale(1e-3));
      }
      // Adam moves each parameter by about lr per step: compare the moves.
      auto pa = params_of(**fused, model), pb = params_of(**stepwise, model);
      CHECK(max_abs_diff(pa, pb) <= in.request.lr * 0.05);
    }
    std::vector<float> ma(model.param_count()), va(ma.size()), mb(ma.size()),
      vb(ma.size());
    int64_t sa = 0, sb = 0;
    REQUIRE((*fused)->read_optimizer(ma.data(), va.data(), &sa));
    REQUIRE((*stepwise)->read_optimizer(mb.data(), vb.data(), &sb));
    CHECK(sa == sb);
    CHECK(sa == static_cast<int64_t>(4 * epochs * mbs - epochs));
  }
}

TEST_CASE("the CUDA backend hands out and takes Adam's state, and steps from it as the "
          "CPU backend does") {
  if (const std::string why = cuda_missing(); !why.empty())
    TROUPE_SKIP("CUDA optimizer state (" + why + ")");
  auto seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  model_spec spec;
  spec.obs_dim = 4;
  spec.n = 3; // host_batch draws actions in [0, 3)
  spec.hidden = {16, 16};
  actor_critic model(spec, rng());
  auto cuda = make_cuda_backend(spec, adam_config{});
  REQUIRE(cuda);
  auto cpu = make_cpu_backend(spec, adam_config{});
  const size_t n = model.param_count();
  std::vector<float> m(n), v(n);
  std::normal_distribution<float> normal(0.0f, 1e-2f);
  for (size_t i = 0; i < n; ++i) {
    m[i] = normal(rng);
    v[i] = std::abs(normal(rng)) * 1e-2f;
  }
  for (auto* b : {cuda->get(), cpu.get()}) {
    REQUIRE(b->load(model.params(), model.buffers()));
    REQUIRE(b->write_optimizer(m.data(), v.data(), 41));
  }
  std::vector<float> m2(n), v2(n);
  int64_t steps = 0;
  REQUIRE((*cuda)->read_optimizer(m2.data(), v2.data(), &steps));
  CHECK(steps == 41);
  CHECK(m2 == m);
  CHECK(v2 == v);
  CHECK_FALSE((*cuda)->write_optimizer(m.data(), v.data(), -1));
  host_batch data(spec, 64, rng);
  for (auto* b : {cuda->get(), cpu.get()}) {
    REQUIRE(b->ppo_gradient(data.view(), ppo_config{}));
    REQUIRE(b->apply_gradient(1e-3, 0.5));
  }
  auto pa = params_of(**cuda, model), pb = params_of(*cpu, model);
  CHECK(max_abs_diff(pa, pb) <= 1e-3 * 0.02);
}

// Bit for bit: the same float in every place (NaN included).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Equal in every place, or NaN in both. (A one-thread gradient is a sum
// started from +0, so an all-zero column is +0 where the two-thread one
// keeps its -0; Adam's steps from either are the same bits.)
bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))))
      return false;
  return true;
}

TEST_CASE("a CPU backend with actor and critic on two threads computes bit for bit what "
          "one thread computes, gradient, losses, Adam step and state") {
  const uint64_t seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  for (auto bn : {batch_norm_mode::none, batch_norm_mode::global})
    for (bool box : {false, true}) {
      const std::string bn_name = to_string(bn);
      CAPTURE(bn_name);
      CAPTURE(box);
      const int64_t width = 8 + static_cast<int64_t>(rng() % 57);
      const model_spec spec =
        parity_spec(1 + static_cast<int64_t>(rng() % 7), {width, width}, box, bn);
      CAPTURE(width);
      actor_critic model(spec, rng());
      const size_t n = model.param_count();
      backend_options one, two;
      one.threads = 1;
      two.threads = 2;
      two.split_networks = true; // with batch norm: one thread, and no row shards
      auto a = make_cpu_backend(spec, adam_config{}, one);
      auto b = make_cpu_backend(spec, adam_config{}, two);
      REQUIRE(a->load(model.params(), model.buffers()));
      REQUIRE(b->load(model.params(), model.buffers()));
      auto state = [&](learner_backend& backend) {
        std::vector<float> grad(n), params(n), buffers(model.buffer_count()), m(n), v(n);
        int64_t steps = -1;
        REQUIRE(backend.read_gradient(grad.data()));
        REQUIRE(backend.store(params.data(), buffers.data()));
        REQUIRE(backend.read_optimizer(m.data(), v.data(), &steps));
        return std::make_tuple(grad, params, m, v, steps);
      };
      for (int step = 0; step < 12; ++step) {
        CAPTURE(step);
        // Row counts on both sides of the row shards' 256 (which the split
        // never takes), a clip that bites or not, and now and then a NaN.
        const size_t rows = 1 + rng() % 600;
        CAPTURE(rows);
        host_batch data(spec, rows, rng);
        const bool poisoned = step % 5 == 4;
        if (poisoned)
          data.obs[rng() % data.obs.size()] = std::nanf("");
        ppo_config loss;
        loss.normalize_advantages = rng() % 2 == 0;
        loss.clip_value_loss = rng() % 2 == 0;
        loss.ent_coef = 0.01 * static_cast<double>(rng() % 3);
        auto ra = a->ppo_gradient(data.view(), loss);
        auto rb = b->ppo_gradient(data.view(), loss);
        REQUIRE(ra);
        REQUIRE(rb);
        if (!poisoned) {
          CHECK(rb->loss == ra->loss);
          CHECK(rb->policy_loss == ra->policy_loss);
          CHECK(rb->value_loss == ra->value_loss);
          CHECK(rb->entropy == ra->entropy);
          CHECK(rb->approx_kl == ra->approx_kl);
          CHECK(rb->clip_fraction == ra->clip_fraction);
        }
        const double max_norm = rng() % 2 ? 0.5 : 1e9;
        auto na = a->apply_gradient(1e-3, max_norm);
        auto nb = b->apply_gradient(1e-3, max_norm);
        REQUIRE(na);
        REQUIRE(nb);
        CHECK(std::isfinite(*na) == !poisoned);
        if (!poisoned)
          CHECK(*nb == *na);
        CHECK(std::isfinite(*nb) == std::isfinite(*na));
        const auto sa = state(*a);
        const auto sb = state(*b);
        CHECK(same_values(std::get<0>(sb), std::get<0>(sa)));
        CHECK(same_bits(std::get<1>(sb), std::get<1>(sa)));
        CHECK(same_bits(std::get<2>(sb), std::get<2>(sa)));
        CHECK(same_bits(std::get<3>(sb), std::get<3>(sa)));
        CHECK(std::get<4>(sb) == std::get<4>(sa));
      }
    }
}

TEST_CASE("the CPU backend with actor and critic on two threads matches a float64 "
          "reference on the whole batch") {
  check_against_float64([](const model_spec& spec, const adam_config& adam) {
    backend_options options;
    options.threads = 2;
    options.split_networks = true;
    return make_cpu_backend(spec, adam, options);
  });
}
