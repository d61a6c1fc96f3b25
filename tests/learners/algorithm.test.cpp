// The algorithm registry and the algorithms' batch requirements: unknown
// names and keys fail naming what exists, a batch an algorithm cannot learn
// is an error naming the algorithm and the numbers, and PPO's update sends
// update_epochs x num_minibatches gradients that together cover every valid
// row once per epoch, the last one marked.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <tuple>
#include <string>
#include <vector>

#include "learners/a3c.hpp"
#include "learners/algorithm.hpp"
#include "learners/impala.hpp"
#include "learners/mlp.hpp"
#include "learners/ppo.hpp"
#include "learners/rollout.hpp"
#include "tests/seed.hpp"

using namespace troupe;
using namespace troupe::learners;

namespace {

model_spec small_spec() {
  model_spec spec;
  spec.obs_dim = 3;
  spec.n = 2;
  spec.hidden = {8};
  return spec;
}

// A batch of random observations and actions, with `resets` reset steps.
struct random_rollout {
  std::vector<float> obs, actions, rewards, logp;
  std::vector<uint8_t> terminated, truncated, autoreset;
  rollout_view view;

  random_rollout(std::mt19937_64& gen, size_t steps, size_t envs, size_t resets) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const size_t rows = steps * envs;
    obs.resize((rows + envs) * 3);
    for (auto& x : obs)
      x = normal(gen);
    for (size_t k = 0; k < rows; ++k) {
      actions.push_back(static_cast<float>(gen() % 2));
      rewards.push_back(normal(gen));
      logp.push_back(-0.69f + 0.1f * normal(gen));
    }
    terminated.assign(rows, 0);
    truncated.assign(rows, 0);
    autoreset.assign(rows, 0);
    for (size_t k = 0; k < resets; ++k)
      autoreset[rows - 1 - k] = 1;
    view.steps = steps;
    view.envs = envs;
    view.obs_dim = 3;
    view.action_dim = 1;
    view.observations = obs.data();
    view.actions = actions.data();
    view.rewards = rewards.data();
    view.terminated = terminated.data();
    view.truncated = truncated.data();
    view.autoreset = autoreset.data();
  }
};

using values_by_key = std::map<std::string, double>;

// The settings of algorithm `name` read from `values` by its declared keys
// (defaults for the rest); every key given must be one of its own.
algorithm_settings settings_from(const std::string& name, const values_by_key& values) {
  algorithm_settings s;
  s.name = name;
  const algorithm_info* info = find_algorithm(name);
  REQUIRE(info != nullptr);
  size_t used = 0;
  auto read = info->read([&](const hyperparameter& h) {
    auto it = values.find(h.key);
    if (it == values.end())
      return h.default_value;
    ++used;
    return it->second;
  });
  REQUIRE_MESSAGE(read.ok(), (read.ok() ? std::string{} : read.err().message));
  REQUIRE(used == values.size());
  s.settings = std::move(*read);
  return s;
}

std::unique_ptr<algorithm> make(const std::string& name, const values_by_key& values = {},
                                const model_spec& spec = small_spec()) {
  const algorithm_settings s = settings_from(name, values);
  auto made = make_algorithm(spec, s);
  REQUIRE_MESSAGE(made.ok(), (made.ok() ? std::string{} : made.err().message));
  return std::move(*made);
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Records what an update asks of the learner, on a CPU backend.
class recording_host final : public update_host {
public:
  explicit recording_host(uint64_t seed, const model_spec& spec = small_spec())
    : backend_(make_cpu_backend(spec, adam_config{})), gen_(seed) {}
  recording_host(uint64_t seed, std::unique_ptr<learner_backend> backend)
    : backend_(std::move(backend)), gen_(seed) {}
  learner_backend& backend() override { return *backend_; }
  base::rng& generator() override { return gen_; }
  status load_weights() override {
    loads += 1;
    return backend_->load(weights->params(), weights->buffers());
  }
  status push_gradient(size_t samples, bool last) override {
    pushes.push_back({samples, last});
    return ok_status();
  }
  const actor_critic* weights = nullptr;
  size_t loads = 0;
  std::vector<std::pair<size_t, bool>> pushes;

private:
  std::unique_ptr<learner_backend> backend_;
  base::rng gen_;
};

// A backend that hands every call to a CPU backend; the test backends below
// override the calls they watch.
class delegating_backend : public learner_backend {
public:
  explicit delegating_backend(const model_spec& spec)
    : inner_(make_cpu_backend(spec, adam_config{})) {}
  device_kind device() const noexcept override { return inner_->device(); }
  status load(const float* params, const float* buffers) override {
    return inner_->load(params, buffers);
  }
  status store(float* params, float* buffers) override {
    return inner_->store(params, buffers);
  }
  status read_global_stats(const std::vector<stats_view*>& views) override {
    return inner_->read_global_stats(views);
  }
  result<loss_report> ppo_gradient(const ppo_batch<float>& batch,
                                   const ppo_config& config) override {
    return inner_->ppo_gradient(batch, config);
  }
  result<loss_report> vtrace_gradient(const vtrace_batch<float>& batch,
                                      const vtrace_config& config) override {
    return inner_->vtrace_gradient(batch, config);
  }
  status read_gradient(float* grad) override { return inner_->read_gradient(grad); }
  result<double> apply_gradient(double lr, double max_grad_norm) override {
    return inner_->apply_gradient(lr, max_grad_norm);
  }
  status read_optimizer(float* m, float* v, int64_t* steps) override {
    return inner_->read_optimizer(m, v, steps);
  }
  status write_optimizer(const float* m, const float* v, int64_t steps) override {
    return inner_->write_optimizer(m, v, steps);
  }
  const std::vector<kernels::moments>& batch_moments() const noexcept override {
    return inner_->batch_moments();
  }

private:
  std::unique_ptr<learner_backend> inner_;
};

// A CPU backend that keeps what the first gradient's loss divides by: the
// behavior log-probabilities of a V-trace batch, or a PPO-loss batch's old
// log-probabilities with its rows (observations and actions).
class capturing_backend final : public delegating_backend {
public:
  explicit capturing_backend(const model_spec& spec)
    : delegating_backend(spec), obs_dim_(spec.obs_dim) {}
  result<loss_report> ppo_gradient(const ppo_batch<float>& batch,
                                   const ppo_config& config) override {
    if (gradients++ == 0) {
      const size_t rows = batch.rows;
      old_logp.assign(batch.old_logprob, batch.old_logprob + rows);
      obs.assign(batch.obs, batch.obs + rows * static_cast<size_t>(obs_dim_));
      actions.assign(batch.discrete_actions, batch.discrete_actions + rows);
    }
    return delegating_backend::ppo_gradient(batch, config);
  }
  result<loss_report> vtrace_gradient(const vtrace_batch<float>& batch,
                                      const vtrace_config& config) override {
    if (gradients++ == 0) {
      const size_t n = batch.steps * batch.envs;
      old_logp.assign(batch.behavior_logprob, batch.behavior_logprob + n);
      actions.assign(batch.discrete_actions, batch.discrete_actions + n);
    }
    return delegating_backend::vtrace_gradient(batch, config);
  }

  size_t gradients = 0;
  std::vector<float> old_logp, obs; ///< the first gradient's
  std::vector<int64_t> actions;     ///< the first gradient's

private:
  int64_t obs_dim_;
};

// A discrete model with local batch norm, weights of unit scale (the initial
// policy layer's gain of 0.01 would make any policy nearly uniform) and
// running statistics far from any batch's (the observations are standard
// normal): the acting pass normalizes unlike the learning pass.
actor_critic local_bn_model(std::mt19937_64& gen, uint64_t seed) {
  model_spec spec = small_spec();
  spec.batch_norm = batch_norm_mode::local;
  actor_critic model(spec, seed);
  std::normal_distribution<float> weight(0.0f, 1.0f);
  for (size_t i = 0; i < model.param_count(); ++i)
    model.params()[i] = weight(gen);
  std::uniform_real_distribution<float> shift(2.0f, 4.0f), var(0.01f, 0.1f);
  const auto layers = model.batch_norm_layers();
  REQUIRE(layers.size() == 2); // actor and critic
  for (const auto& bn : layers)
    for (int64_t j = 0; j < bn.width; ++j) {
      model.buffers()[bn.running_mean + j] = shift(gen);
      model.buffers()[bn.running_var + j] = var(gen);
    }
  return model;
}

// The float64 reference of a local learning pass: log pi(a | x) of `rows`
// observations, batch norm normalizing with these rows' own statistics,
// for the first `action_rows` rows.
std::vector<double> learning_pass_logp(const actor_critic& model, const float* obs,
                                       size_t rows, const int64_t* actions,
                                       size_t action_rows) {
  const auto& spec = model.spec();
  const std::vector<double> params(model.params(), model.params() + model.param_count());
  const std::vector<double> buffers(model.buffers(),
                                    model.buffers() + model.layout().buffer_count);
  const std::vector<double> input(obs, obs + rows * static_cast<size_t>(spec.obs_dim));
  network_cache<double> actor;
  network_forward(model.layout().actor, spec, params.data(), buffers.data(), input.data(),
                  rows, forward_mode::train, actor);
  head_cache<double> head;
  categorical_forward(actor.out.data(), action_rows, static_cast<size_t>(spec.n), actions,
                      head);
  return {head.logp.begin(), head.logp.begin() + static_cast<ptrdiff_t>(action_rows)};
}

// The largest |pi/mu - 1| over the rows `keep` leaves in.
double largest_ratio_error(const std::vector<double>& pi_logp,
                           const std::vector<float>& mu_logp,
                           const std::vector<bool>& keep) {
  double worst = 0;
  for (size_t k = 0; k < pi_logp.size(); ++k)
    if (keep[k])
      worst = std::max(worst, std::abs(std::exp(pi_logp[k] - mu_logp[k]) - 1.0));
  return worst;
}

} // namespace

TEST_CASE("the registry makes every algorithm it lists with its defaults, and refuses an "
          "unknown algorithm, another algorithm's settings and a value out of range, "
          "naming them") {
  REQUIRE(algorithms().size() >= 3);
  for (auto& a : algorithms()) {
    CAPTURE(a.name);
    CHECK(find_algorithm(a.name) == &a);
    CHECK(std::string{make(a.name)->name()} == a.name);
  }
  algorithm_settings s;
  s.name = "dqn";
  auto unknown = make_algorithm(small_spec(), s);
  REQUIRE_FALSE(unknown.ok());
  CHECK(contains(unknown.err().message, "unknown algorithm 'dqn'"));
  CHECK(contains(unknown.err().message, "ppo, impala, a3c"));

  s.name = "impala";
  settings_of<ppo_settings>(s).loss.clip_coef = 0.1;
  auto foreign = make_algorithm(small_spec(), s);
  REQUIRE_FALSE(foreign.ok());
  CHECK(contains(foreign.err().message,
                 "impala: the settings given are another algorithm's"));

  s.name = "ppo";
  settings_of<ppo_settings>(s).loss.clip_coef = -0.5;
  auto negative = make_algorithm(small_spec(), s);
  REQUIRE_FALSE(negative.ok());
  CHECK(contains(negative.err().message, "ppo: clip_coef = -0.5 is outside [0, 10]"));

  auto fraction = find_algorithm("ppo")->read([](const hyperparameter& h) {
    return std::string{h.key} == "num_minibatches" ? 2.5 : h.default_value;
  });
  REQUIRE_FALSE(fraction.ok());
  CHECK(contains(fraction.err().message, "num_minibatches = 2.5"));
}

TEST_CASE("each declared hyperparameter reads into its own field of the settings struct, "
          "and the declared defaults are the struct's") {
  std::mt19937_64 gen(test::fresh_seed());
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  // Where each key lives, written here independently of the declarations.
  const auto ppo_fields = [](const ppo_settings& p) {
    return values_by_key{{"gae_lambda", p.gae_lambda},
                         {"num_minibatches", static_cast<double>(p.num_minibatches)},
                         {"update_epochs", static_cast<double>(p.update_epochs)},
                         {"norm_adv", p.loss.normalize_advantages ? 1.0 : 0.0},
                         {"clip_coef", p.loss.clip_coef},
                         {"clip_vloss", p.loss.clip_value_loss ? 1.0 : 0.0},
                         {"ent_coef", p.loss.ent_coef},
                         {"vf_coef", p.loss.vf_coef},
                         {"local_bn_same_pass", p.local_bn_same_pass ? 1.0 : 0.0}};
  };
  const auto impala_fields = [](const impala_settings& p) {
    return values_by_key{{"rho_bar", p.loss.rho_bar},
                         {"c_bar", p.loss.c_bar},
                         {"pg_rho_bar", p.loss.pg_rho_bar},
                         {"ent_coef", p.loss.ent_coef},
                         {"vf_coef", p.loss.baseline_coef},
                         {"policy_clip", p.loss.policy_clip},
                         {"local_bn_same_pass", p.local_bn_same_pass ? 1.0 : 0.0}};
  };
  const auto a3c_fields = [](const a3c_settings& p) {
    return values_by_key{{"gae_lambda", p.gae_lambda},
                         {"ent_coef", p.ent_coef},
                         {"vf_coef", p.vf_coef},
                         {"local_bn_same_pass", p.local_bn_same_pass ? 1.0 : 0.0}};
  };
  // Distinct random values in range for every key of `info`.
  const auto random_values = [&](const algorithm_info& info) {
    values_by_key v;
    for (auto& h : info.hyperparameters) {
      if (h.type == hyperparameter_type::boolean)
        v[h.key] = h.default_value != 0 ? 0.0 : 1.0; // the other value
      else if (h.type == hyperparameter_type::integer)
        v[h.key] = std::floor(h.min + 1 + unit(gen) * std::min(h.max - h.min - 1, 50.0));
      else
        v[h.key] = h.min + (0.1 + 0.8 * unit(gen)) * std::min(h.max - h.min, 5.0);
    }
    return v;
  };
  const auto defaults_of = [](const algorithm_info& info) {
    values_by_key v;
    for (auto& h : info.hyperparameters)
      v[h.key] = h.default_value;
    return v;
  };
  for (int round = 0; round < 3; ++round) {
    const auto* ppo = find_algorithm("ppo");
    const auto* impala = find_algorithm("impala");
    const auto* a3c = find_algorithm("a3c");
    REQUIRE(ppo);
    REQUIRE(impala);
    REQUIRE(a3c);
    CHECK(defaults_of(*ppo) == ppo_fields(ppo_settings{}));
    CHECK(defaults_of(*impala) == impala_fields(impala_settings{}));
    CHECK(defaults_of(*a3c) == a3c_fields(a3c_settings{}));
    const auto vp = random_values(*ppo), vi = random_values(*impala),
               va = random_values(*a3c);
    auto sp = settings_from("ppo", vp), si = settings_from("impala", vi),
         sa = settings_from("a3c", va);
    CHECK(ppo_fields(settings_of<ppo_settings>(sp)) == vp);
    CHECK(impala_fields(settings_of<impala_settings>(si)) == vi);
    CHECK(a3c_fields(settings_of<a3c_settings>(sa)) == va);
  }
}

TEST_CASE("PPO refuses a batch with fewer transitions than minibatches, naming the "
          "algorithm and the numbers") {
  std::mt19937_64 gen(test::fresh_seed());
  auto ppo = make("ppo", {{"num_minibatches", 8}});
  auto size = ppo->check_batch_size(6);
  REQUIRE_FALSE(size.ok());
  CHECK(contains(size.err().message, "ppo: a batch of 6 transitions"));
  CHECK(contains(size.err().message, "num_minibatches = 8"));
  CHECK(ppo->check_batch_size(8).ok());

  random_rollout short_batch(gen, 3, 3, 2); // 9 rows, 2 reset steps: 7 transitions
  auto refused = ppo->check_batch(short_batch.view);
  REQUIRE_FALSE(refused.ok());
  CHECK(contains(refused.err().message,
                 "ppo: the batch has 7 transitions (3 steps x 3 environments, 2 reset "
                 "steps), fewer than num_minibatches = 8"));
  random_rollout enough(gen, 4, 2, 0);
  CHECK(ppo->check_batch(enough.view).ok());
}

TEST_CASE("IMPALA refuses a batch whose behavior log-probabilities are missing for some "
          "steps, or for a batch acted with several versions, naming the numbers") {
  std::mt19937_64 gen(test::fresh_seed());
  auto impala = make("impala");
  random_rollout b(gen, 4, 2, 1);
  CHECK(impala->check_batch(b.view).ok()); // none: recomputed from the acting weights
  b.view.behavior_logp = b.logp.data();
  b.view.behavior_logp_count = 8;
  CHECK(impala->check_batch(b.view).ok());
  b.view.behavior_logp_count = 5;
  auto partial = impala->check_batch(b.view);
  REQUIRE_FALSE(partial.ok());
  CHECK(contains(partial.err().message,
                 "impala: V-trace needs the behavior log-probability of every step; the "
                 "batch has 5 for 8 steps (4 steps x 2 environments)"));
  b.view.behavior_logp = nullptr;
  b.view.behavior_logp_count = 0;
  b.view.behavior_recorded = true;
  auto recorded = impala->check_batch(b.view);
  REQUIRE_FALSE(recorded.ok());
  CHECK(contains(recorded.err().message, "has 0 for 8 steps"));
  CHECK(contains(recorded.err().message, "cannot be recomputed"));
}

TEST_CASE("a PPO update sends update_epochs x num_minibatches gradients covering every "
          "transition once per epoch, only the last marked last, and A3C sends one") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const actor_critic model(small_spec(), seed);
  random_rollout b(gen, 5, 3, 2); // 13 transitions
  // Not a structured binding: clang 14 refuses one captured by CAPTURE's lambda.
  for (const auto& c : {std::tuple{"ppo", size_t{3}, size_t{4}},
                        std::tuple{"a3c", size_t{1}, size_t{1}}}) {
    const char* name = std::get<0>(c);
    const size_t epochs = std::get<1>(c), mbs = std::get<2>(c);
    CAPTURE(name);
    values_by_key v;
    if (std::string{name} == "ppo")
      v = {{"update_epochs", 3}, {"num_minibatches", 4}};
    auto algo = make(name, v);
    recording_host host(seed);
    host.weights = &model;
    REQUIRE(algo->check_batch(b.view).ok());
    auto m = algo->update(b.view, model, host);
    REQUIRE(m.ok());
    CHECK(m->gradients == epochs * mbs);
    CHECK(std::isfinite(m->policy_loss));
    CHECK(m->entropy > 0);
    REQUIRE(host.pushes.size() == epochs * mbs);
    CHECK(host.loads == epochs * mbs);
    for (size_t e = 0; e < epochs; ++e) {
      size_t rows = 0;
      for (size_t i = 0; i < mbs; ++i) {
        const auto& [samples, last] = host.pushes[e * mbs + i];
        CHECK(samples >= 13 / mbs);
        rows += samples;
        CHECK(last == (e + 1 == epochs && i + 1 == mbs));
      }
      CHECK(rows == 13);
    }
  }
}

namespace {

// A CPU backend that records every minibatch it is given and, when told to,
// claims to run whole updates (running them minibatch by minibatch itself).
class minibatch_recorder final : public delegating_backend {
public:
  minibatch_recorder(const model_spec& spec, bool fuse)
    : delegating_backend(spec), spec_(spec), fuse_(fuse) {}
  result<loss_report> ppo_gradient(const ppo_batch<float>& b,
                                   const ppo_config& config) override {
    const size_t od = static_cast<size_t>(spec_.obs_dim);
    std::vector<float> rows(b.obs, b.obs + b.rows * od);
    for (size_t r = 0; r < b.rows; ++r) {
      rows.push_back(static_cast<float>(b.discrete_actions[r]));
      rows.push_back(b.old_logprob[r]);
      rows.push_back(b.advantages[r]);
      rows.push_back(b.returns[r]);
      rows.push_back(b.old_values[r]);
    }
    minibatches.push_back(std::move(rows));
    return delegating_backend::ppo_gradient(b, config);
  }
  result<double> apply_gradient(double lr, double max_grad_norm) override {
    steps.push_back({lr, max_grad_norm});
    return delegating_backend::apply_gradient(lr, max_grad_norm);
  }
  bool fuses_updates() const noexcept override { return fuse_; }
  result<ppo_update_report> ppo_update(const ppo_update_request& request,
                                       const ppo_config& config) override {
    whole_updates += 1;
    return ppo_update_stepwise(*this, spec_, request, config);
  }

  std::vector<std::vector<float>> minibatches;  ///< each minibatch's rows, in order
  std::vector<std::pair<double, double>> steps; ///< (lr, clip) of each applied step
  size_t whole_updates = 0;

private:
  model_spec spec_;
  bool fuse_;
};

// A lone learner stepping locally: each pushed gradient is applied at once.
class local_host final : public update_host {
public:
  local_host(uint64_t seed, std::unique_ptr<minibatch_recorder> backend, bool local)
    : backend_(std::move(backend)), gen_(seed), local_(local) {}
  learner_backend& backend() override { return *backend_; }
  minibatch_recorder& recorder() { return *backend_; }
  base::rng& generator() override { return gen_; }
  status load_weights() override { return ok_status(); }
  status push_gradient(size_t, bool last) override {
    auto norm = backend_->apply_gradient(lr, clip);
    if (!norm)
      return norm.err();
    taken += 1;
    ends += last;
    return ok_status();
  }
  std::optional<local_step_settings> local_steps() override {
    if (!local_)
      return std::nullopt;
    return local_step_settings{lr, clip};
  }
  status finish_local_update(size_t t, size_t rejected) override {
    taken += t;
    refused += rejected;
    ends += 1;
    return ok_status();
  }
  double lr = 7e-4, clip = 0.3;
  size_t taken = 0, refused = 0, ends = 0;

private:
  std::unique_ptr<minibatch_recorder> backend_;
  base::rng gen_;
  bool local_;
};

} // namespace

TEST_CASE("a lone learner's whole update in the backend sees the same minibatches, in "
          "the same order and with the same steps, as the minibatch loop") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const actor_critic model(small_spec(), seed);
  random_rollout b(gen, 7, 3, 3); // 18 transitions, 3 reset steps
  auto algo_loop = make("ppo", {{"update_epochs", 3}, {"num_minibatches", 4}});
  auto algo_whole = make("ppo", {{"update_epochs", 3}, {"num_minibatches", 4}});
  // Only a local learner on a backend that runs whole updates takes that path.
  local_host loop(seed, std::make_unique<minibatch_recorder>(small_spec(), true), false);
  local_host whole(seed, std::make_unique<minibatch_recorder>(small_spec(), true), true);
  for (auto* h : {&loop, &whole})
    REQUIRE(h->backend().load(model.params(), model.buffers()));
  auto m_loop = algo_loop->update(b.view, model, loop);
  auto m_whole = algo_whole->update(b.view, model, whole);
  REQUIRE(m_loop);
  REQUIRE(m_whole);
  CHECK(loop.recorder().whole_updates == 0);
  CHECK(whole.recorder().whole_updates == 1);
  CHECK(m_whole->gradients == 12);
  CHECK(m_loop->gradients == 12);
  CHECK(whole.taken == 12);
  CHECK(whole.refused == 0);
  CHECK(whole.ends == 1);
  CHECK(loop.ends == 1);
  REQUIRE(whole.recorder().minibatches.size() == 12);
  CHECK(whole.recorder().minibatches == loop.recorder().minibatches);
  CHECK(whole.recorder().steps == loop.recorder().steps);
  CHECK(m_whole->policy_loss == m_loop->policy_loss);
  CHECK(m_whole->approx_kl == m_loop->approx_kl);
  // The generators were drawn alike: the next draw agrees.
  CHECK(whole.generator().next() == loop.generator().next());
  std::vector<float> pa(model.param_count()), pb(pa.size()), buf(1);
  REQUIRE(whole.backend().store(pa.data(), buf.data()));
  REQUIRE(loop.backend().store(pb.data(), buf.data()));
  CHECK(pa == pb);
}

TEST_CASE("local batch norm: PPO's ratio takes the acting weights normalized as the "
          "learning pass normalizes, so it is 1 for unchanged weights, and taken from "
          "the acting pass it is not") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const actor_critic model = local_bn_model(gen, seed);
  const model_spec& spec = model.spec();
  random_rollout b(gen, 16, 4, 3);
  // The host never changes the weights: every gradient is taken at the
  // acting weights, over minibatches reshuffled each epoch.
  for (const double same_pass : {1.0, 0.0}) {
    CAPTURE(same_pass);
    auto algo = make(
      "ppo",
      {{"update_epochs", 2}, {"num_minibatches", 3}, {"local_bn_same_pass", same_pass}},
      spec);
    recording_host host(seed, spec);
    host.weights = &model;
    auto m = algo->update(b.view, model, host);
    REQUIRE(m.ok());
    REQUIRE(m->gradients == 6);
    if (same_pass != 0) {
      CHECK(m->approx_kl < 1e-6);
      CHECK(m->clip_fraction == 0.0);
    } else {
      CHECK(m->approx_kl > 1e-3);
    }
  }
}

TEST_CASE("local batch norm: IMPALA's mu is taken with the acting weights normalized as "
          "the learning pass normalizes the whole batch, so pi/mu is 1 at zero policy "
          "lag, while as recorded when acting it is not, and it stays so when the acting "
          "version is no longer kept") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const actor_critic model = local_bn_model(gen, seed);
  const model_spec& spec = model.spec();
  random_rollout b(gen, 16, 4, 3);
  const size_t rows = b.view.rows(), all = rows + b.view.envs;
  // mu as a runner records it: the acting pass, with running statistics.
  behavior_outputs acting;
  REQUIRE(acting.compute(model, b.view).ok());
  b.view.behavior_logp = acting.logp.data();
  b.view.behavior_logp_count = rows;
  std::vector<bool> valid(rows);
  for (size_t k = 0; k < rows; ++k)
    valid[k] = b.autoreset[k] == 0; // reset steps: rho = 0 by design
  // pi: V-trace's learning pass over every row, bootstrap rows included.
  std::vector<int64_t> actions(rows);
  for (size_t k = 0; k < rows; ++k)
    actions[k] = static_cast<int64_t>(b.actions[k]);
  const auto pi_logp = learning_pass_logp(model, b.obs.data(), all, actions.data(), rows);
  for (const double same_pass : {1.0, 0.0}) {
    for (const bool kept : {true, false}) {
      CAPTURE(same_pass);
      CAPTURE(kept);
      b.view.acting_version_kept = kept;
      auto algo = make("impala", {{"local_bn_same_pass", same_pass}}, spec);
      auto backend = std::make_unique<capturing_backend>(spec);
      auto& seen = *backend;
      recording_host host(seed, std::move(backend));
      host.weights = &model; // unchanged weights: zero policy lag
      auto m = algo->update(b.view, model, host);
      REQUIRE(m.ok());
      REQUIRE(seen.gradients == 1);
      REQUIRE(seen.old_logp.size() == rows);
      CHECK(seen.actions == actions);
      for (size_t k = 0; k < rows; ++k)
        if (!valid[k])
          CHECK(seen.old_logp[k] == vtrace_reset_logprob);
      const double error = largest_ratio_error(pi_logp, seen.old_logp, valid);
      CAPTURE(error);
      if (same_pass != 0 && kept) {
        CHECK(error < 1e-5);
      } else {
        // The record is kept: what the runner wrote, not recomputed.
        for (size_t k = 0; k < rows; ++k)
          if (valid[k])
            CHECK(seen.old_logp[k] == acting.logp[k]);
        CHECK(error > 1e-2);
      }
    }
  }
  // Without a record, mu is recomputed in either case, normalized alike.
  b.view.behavior_logp = nullptr;
  b.view.behavior_logp_count = 0;
  b.view.acting_version_kept = false;
  auto algo = make("impala", {}, spec);
  auto backend = std::make_unique<capturing_backend>(spec);
  auto& seen = *backend;
  recording_host host(seed, std::move(backend));
  host.weights = &model;
  REQUIRE(algo->update(b.view, model, host).ok());
  CHECK(largest_ratio_error(pi_logp, seen.old_logp, valid) < 1e-5);
}

TEST_CASE("local batch norm: A3C's ratio takes the current weights normalized as the "
          "learning pass normalizes the batch's transitions, so it is 1 as A3C's loss "
          "means, and from running statistics it is not") {
  const uint64_t seed = test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 gen(seed);
  const actor_critic model = local_bn_model(gen, seed);
  const model_spec& spec = model.spec();
  random_rollout b(gen, 16, 4, 3);
  const size_t transitions = b.view.rows() - 3;
  for (const double same_pass : {1.0, 0.0}) {
    CAPTURE(same_pass);
    auto algo = make("a3c", {{"local_bn_same_pass", same_pass}}, spec);
    auto backend = std::make_unique<capturing_backend>(spec);
    auto& seen = *backend;
    recording_host host(seed, std::move(backend));
    host.weights = &model;
    auto m = algo->update(b.view, model, host);
    REQUIRE(m.ok());
    REQUIRE(seen.gradients == 1);
    REQUIRE(seen.old_logp.size() == transitions);
    // pi: the learning pass over exactly the rows the gradient saw.
    const auto pi_logp = learning_pass_logp(model, seen.obs.data(), transitions,
                                            seen.actions.data(), transitions);
    const double error =
      largest_ratio_error(pi_logp, seen.old_logp, std::vector<bool>(transitions, true));
    CAPTURE(error);
    if (same_pass != 0)
      CHECK(error < 1e-5);
    else
      CHECK(error > 1e-2);
  }
}
