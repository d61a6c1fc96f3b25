#include "actors/learner.hpp"
#include "actors/exceptions.hpp"
#include "actors/log.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "kernels/rng.hpp"
#include "learners/backend.hpp"
#include "learners/mlp.hpp"
#include "learners/optimizer.hpp"
#include "learners/rollout.hpp"

namespace troupe::actors {

namespace {

struct runner_slot {
  caf::actor actor; // invalid until the supervisor hands one over
  std::string name;
  uint64_t restarts = 0;
  bool outstanding = false; // a batch is being collected for us
  size_t index = 0;
  bool guest = false;         // another host's runner (an environment-only host)
  bool guest_batches = false; // one of its batches was learned (logged once)
};

// Everything one learner reuses from batch to batch.
struct learner_work {
  explicit learner_work(learners::actor_critic model) : current(std::move(model)) {}

  learner_options opts;
  caf::actor server;
  caf::actor metrics;
  std::shared_ptr<policy_store> store;
  std::shared_ptr<step_budget> budget;
  std::shared_ptr<learners::stats_view> view;
  std::unique_ptr<learners::learner_backend> backend;
  learners::actor_critic current; // the weights of the last reply
  uint64_t version = 0;
  std::vector<float> buffers;
  kernels::rng gen;
  uint64_t env_steps_learned = 0;
  uint64_t restarts = 0;
  // The batch being learned: its environment steps go with its last gradient,
  // so that the parameter server's counters match its weights.
  uint64_t batch_env_steps = 0;
  size_t pushes_left = 0;
  bool drained = false; // the server stopped applying: the run is stopping
  uint64_t non_finite = 0;
  // per-batch scratch
  learners::policy_output out;
  learners::head_cache<float> head;
  std::vector<int64_t> actions_i64;
  std::vector<float> values, old_logp, adv, ret, grad;
  std::vector<uint8_t> valid;
  std::vector<size_t> index;
  std::vector<float> mb_obs, mb_box, mb_logp, mb_adv, mb_ret, mb_val;
  std::vector<int64_t> mb_act;
  std::vector<float> discounts, behavior_logp;
  std::vector<learners::stats_view*> bn_views;
  std::vector<float> scratch_params, scratch_buffers;
};

// Global batch norm: the running statistics the next step normalizes with
// come from the keeper's views.
bool load_weights(learner_work& w) {
  if (auto ok = w.backend->load(w.current.params(), w.current.buffers()); !ok)
    return false;
  if (!w.bn_views.empty())
    if (auto ok = w.backend->read_global_stats(w.bn_views); !ok)
      return false;
  return true;
}

void take_weights(learner_work& w, const weights_reply& r) {
  w.version = r.version;
  std::copy(r.params.begin(), r.params.end(), w.current.params());
  w.buffers = r.buffers;
  if (!r.buffers.empty())
    std::copy(r.buffers.begin(), r.buffers.end(), w.current.buffers());
}

uint64_t runner_steps(const learner_options& o, size_t index) {
  return index < o.runner_batch_steps.size() ? o.runner_batch_steps[index]
                                             : o.steps_per_runner_batch;
}

// Environment steps of one batch from each runner.
uint64_t round_steps(const learner_options& o) {
  uint64_t sum = 0;
  for (size_t i = 0; i < o.num_runners; ++i)
    sum += runner_steps(o, i);
  return sum;
}

double scheduled_lr(const learner_work& w) {
  if (!w.opts.anneal_lr || !w.budget || w.budget->total() == 0)
    return w.opts.learning_rate;
  double frac =
    static_cast<double>(w.budget->claimed()) / static_cast<double>(w.budget->total());
  // The batch being learned was claimed one batch per runner ago.
  frac -=
    static_cast<double>(round_steps(w.opts)) / static_cast<double>(w.budget->total());
  return w.opts.learning_rate * std::max(1.0 - std::max(frac, 0.0), 0.0);
}

// Log-probabilities of the batch's actions under `model`, and its values,
// for the T x N acting rows and the N bootstrap rows.
void behavior_outputs(learner_work& w, const learners::actor_critic& model,
                      const trajectory_batch& b) {
  const size_t rows = b.steps * b.num_envs, all = rows + b.num_envs;
  auto ok = model.evaluate(b.observations.data(), all, nullptr, w.out);
  TROUPE_CHECK(ok.ok(), "evaluate failed: {}", ok.ok() ? "" : ok.err().message);
  w.values.assign(w.out.value.begin(), w.out.value.begin() + all);
  const auto& spec = model.spec();
  if (spec.action == learners::action_kind::discrete) {
    w.actions_i64.resize(rows);
    for (size_t k = 0; k < rows; ++k)
      w.actions_i64[k] = static_cast<int64_t>(b.actions[k]);
    learners::categorical_forward<float>(w.out.logits.data(), rows,
                                         static_cast<size_t>(spec.n),
                                         w.actions_i64.data(), w.head);
  } else {
    learners::gaussian_forward<float>(w.out.mean.data(), w.out.log_std.data(), rows,
                                      static_cast<size_t>(spec.act_dim), b.actions.data(),
                                      w.head);
  }
  w.old_logp.assign(w.head.logp.begin(), w.head.logp.begin() + rows);
}

size_t count_non_finite(const trajectory_batch& b) {
  size_t bad = 0;
  for (float x : b.observations)
    bad += !std::isfinite(x);
  for (float x : b.rewards)
    bad += !std::isfinite(x);
  return bad;
}

struct step_totals {
  double policy = 0, value = 0, entropy = 0;
  uint64_t steps = 0, dropped = 0, rejected = 0;
};

// Sends the backend's gradient to the server and takes the weights it answers.
bool push_gradient(caf::blocking_actor* self, learner_work& w, uint64_t samples,
                   double lr, const learners::loss_report& rep, step_totals& totals) {
  w.grad.resize(w.current.param_count());
  if (auto ok = w.backend->read_gradient(w.grad.data()); !ok) {
    write_log(w.opts.log, fmt::format("learner '{}': {}", w.opts.name, ok.err().message));
    return false;
  }
  gradient_update g{w.opts.name, w.version, samples, lr, w.grad, {}, 0};
  if (w.opts.incarnation != 0 && w.opts.gradient_sequence) {
    g.worker = w.opts.worker;
    g.incarnation = w.opts.incarnation;
    g.sequence = ++*w.opts.gradient_sequence;
  }
  if (w.pushes_left > 0 && --w.pushes_left == 0)
    g.batch_env_steps = w.batch_env_steps;
  if (w.current.buffer_count() > 0) {
    // Batch norm: the running statistics go with the gradient (global: as
    // read from the views; local: as this learner's batches moved them).
    w.scratch_params.resize(w.current.param_count());
    w.scratch_buffers.resize(w.current.buffer_count());
    if (w.backend->store(w.scratch_params.data(), w.scratch_buffers.data()))
      g.buffers = w.scratch_buffers;
  }
  if (!w.bn_views.empty() && w.opts.keeper) {
    const auto& layers = w.backend->batch_moments();
    const auto names = w.current.batch_norm_layers();
    for (size_t i = 0; i < layers.size() && i < names.size(); ++i)
      if (layers[i].count > 0)
        self->send(w.opts.keeper,
                   moments_delta{names[i].prefix, w.opts.name, layers[i].count,
                                 layers[i].mean, layers[i].m2});
  }
  bool fine = true;
  self->request(w.server, caf::infinite, std::move(g))
    .receive(
      [&](weights_reply& r) {
        if (r.draining)
          w.drained = true;
        else if (r.rejected)
          totals.rejected += 1;
        else if (!r.applied)
          totals.dropped += 1;
        take_weights(w, r);
      },
      [&](caf::error& e) {
        write_log(w.opts.log, fmt::format("learner '{}': parameter server: {}",
                                          w.opts.name, error_message(self->system(), e)));
        fine = false;
      });
  totals.policy += rep.policy_loss;
  totals.value += rep.value_loss;
  totals.entropy += rep.entropy;
  totals.steps += 1;
  return fine;
}

bool learn_ppo(caf::blocking_actor* self, learner_work& w, const trajectory_batch& b,
               const learners::actor_critic& behavior, double lr, step_totals& totals,
               bool a3c) {
  const size_t n = b.num_envs, rows = b.steps * n, od = b.obs_dim, ad = b.action_dim;
  behavior_outputs(w, behavior, b);
  if (b.behavior_recorded && !a3c && b.behavior_logp.size() == rows)
    // Rows acted with several versions (a game-driven batch): the ratio is
    // taken against the log-probabilities recorded when acting, so that it
    // corrects for the lag each row saw; `behavior` (the current weights
    // here) gives only the values for GAE and the value clip.
    w.old_logp.assign(b.behavior_logp.begin(), b.behavior_logp.end());
  w.adv.resize(rows);
  w.ret.resize(rows);
  w.valid.resize(rows);
  learners::compute_gae(b.steps, n, b.rewards.data(), b.terminated.data(),
                        b.truncated.data(), b.autoreset.data(), w.values.data(),
                        w.opts.gamma, w.opts.gae_lambda, w.adv.data(), w.ret.data(),
                        w.valid.data());
  w.index.clear();
  for (size_t k = 0; k < rows; ++k)
    if (w.valid[k])
      w.index.push_back(k);
  if (w.index.empty())
    return true;
  const bool discrete = w.opts.spec.action == learners::action_kind::discrete;
  const size_t epochs = a3c ? 1 : w.opts.update_epochs;
  const size_t mbs = a3c ? 1 : std::min(w.opts.num_minibatches, w.index.size());
  w.pushes_left = epochs * mbs;
  learners::ppo_config cfg = w.opts.ppo;
  if (a3c) {
    cfg.clip_value_loss = false;
    cfg.normalize_advantages = false;
  }
  for (size_t epoch = 0; epoch < epochs; ++epoch) {
    for (size_t i = w.index.size(); i > 1; --i)
      std::swap(w.index[i - 1], w.index[w.gen.next() % i]);
    for (size_t m = 0; m < mbs; ++m) {
      const size_t lo = w.index.size() * m / mbs, hi = w.index.size() * (m + 1) / mbs;
      const size_t mb = hi - lo;
      w.mb_obs.resize(mb * od);
      w.mb_logp.resize(mb);
      w.mb_adv.resize(mb);
      w.mb_ret.resize(mb);
      w.mb_val.resize(mb);
      w.mb_act.resize(mb);
      w.mb_box.resize(mb * ad);
      for (size_t r = 0; r < mb; ++r) {
        const size_t k = w.index[lo + r];
        std::copy(&b.observations[k * od], &b.observations[k * od] + od,
                  &w.mb_obs[r * od]);
        w.mb_logp[r] = w.old_logp[k];
        w.mb_adv[r] = w.adv[k];
        w.mb_ret[r] = w.ret[k];
        w.mb_val[r] = w.values[k];
        if (discrete)
          w.mb_act[r] = w.actions_i64[k];
        else
          std::copy(&b.actions[k * ad], &b.actions[k * ad] + ad, &w.mb_box[r * ad]);
      }
      learners::ppo_batch<float> batch;
      batch.rows = mb;
      batch.obs = w.mb_obs.data();
      batch.discrete_actions = discrete ? w.mb_act.data() : nullptr;
      batch.box_actions = discrete ? nullptr : w.mb_box.data();
      batch.old_logprob = w.mb_logp.data();
      batch.advantages = w.mb_adv.data();
      batch.returns = w.mb_ret.data();
      batch.old_values = w.mb_val.data();
      if (!load_weights(w))
        return false;
      auto rep = w.backend->ppo_gradient(batch, cfg);
      if (!rep) {
        write_log(w.opts.log,
                  fmt::format("learner '{}': {}", w.opts.name, rep.err().message));
        return false;
      }
      if (!push_gradient(self, w, mb, lr, *rep, totals))
        return false;
    }
  }
  return true;
}

bool learn_impala(caf::blocking_actor* self, learner_work& w, const trajectory_batch& b,
                  const learners::actor_critic& behavior, double lr,
                  step_totals& totals) {
  const size_t n = b.num_envs, rows = b.steps * n;
  const bool discrete = w.opts.spec.action == learners::action_kind::discrete;
  const float* mu_logp = nullptr;
  if (b.behavior_logp.size() == rows) {
    // V-trace needs only mu's log-probabilities, and the runner recorded them
    // when it acted: no forward pass of the behavior policy here.
    mu_logp = b.behavior_logp.data();
    if (discrete) {
      w.actions_i64.resize(rows);
      for (size_t k = 0; k < rows; ++k)
        w.actions_i64[k] = static_cast<int64_t>(b.actions[k]);
    }
  } else {
    // A batch without them (a runner that does not record them): recompute.
    behavior_outputs(w, behavior, b);
    mu_logp = w.old_logp.data();
  }
  w.discounts.resize(rows);
  w.behavior_logp.resize(rows);
  learners::vtrace_inputs(rows, b.terminated.data(), b.autoreset.data(), mu_logp,
                          w.opts.gamma, w.discounts.data(), w.behavior_logp.data());
  mu_logp = w.behavior_logp.data();
  learners::vtrace_batch<float> batch;
  batch.steps = b.steps;
  batch.envs = n;
  batch.obs = b.observations.data();
  batch.discrete_actions = discrete ? w.actions_i64.data() : nullptr;
  batch.box_actions = discrete ? nullptr : b.actions.data();
  batch.behavior_logprob = mu_logp;
  batch.rewards = b.rewards.data();
  batch.discounts = w.discounts.data();
  if (!load_weights(w))
    return false;
  w.pushes_left = 1;
  auto rep = w.backend->vtrace_gradient(batch, w.opts.vtrace);
  if (!rep) {
    write_log(w.opts.log,
              fmt::format("learner '{}': {}", w.opts.name, rep.err().message));
    return false;
  }
  return push_gradient(self, w, rows, lr, *rep, totals);
}

void learner_loop(caf::blocking_actor* self, learner_options opts, caf::actor server,
                  caf::actor metrics, std::shared_ptr<policy_store> store,
                  std::shared_ptr<step_budget> budget,
                  std::shared_ptr<learners::stats_view> view) {
  learner_work w(store->latest()->model);
  w.opts = std::move(opts);
  w.server = std::move(server);
  w.metrics = std::move(metrics);
  w.store = std::move(store);
  w.budget = std::move(budget);
  w.view = std::move(view);
  if (!w.opts.start_gen || !w.gen.set_state(*w.opts.start_gen))
    w.gen.seed_with(w.opts.seed);
  for (auto& v : w.opts.batch_norm_views)
    w.bn_views.push_back(v.get());
  learners::backend_options bo;
  bo.threads = 1;
  if (auto made =
        learners::make_backend(w.opts.device, w.opts.spec, learners::adam_config{}, bo))
    w.backend = std::move(*made);
  else {
    write_log(w.opts.log, fmt::format("learner '{}': {}; computing on the CPU",
                                      w.opts.name, made.err().message));
    w.backend = learners::make_cpu_backend(w.opts.spec, learners::adam_config{}, bo);
  }
  self->request(w.server, caf::infinite, weights_atom::value)
    .receive([&](weights_reply& r) { take_weights(w, r); },
             [&](caf::error& e) {
               write_log(w.opts.log,
                         fmt::format("learner '{}': no weights: {}", w.opts.name,
                                     error_message(self->system(), e)));
             });
  std::vector<runner_slot> runners(w.opts.num_runners);
  for (size_t i = 0; i < runners.size(); ++i) {
    runners[i].name = fmt::format("{}.runner{}", w.opts.name, i);
    runners[i].index = i;
  }
  auto ask_batch = [&](runner_slot& r) {
    if (r.outstanding || !r.actor || !w.budget->claim(runner_steps(w.opts, r.index)))
      return;
    r.outstanding = true;
    self->send(r.actor, collect_atom::value, uint64_t{1});
  };
  auto outstanding = [&] {
    return std::any_of(runners.begin(), runners.end(),
                       [](const runner_slot& r) { return r.outstanding; });
  };
  // Runners arrive from the supervisor; learning starts once every slot has one.
  size_t assigned = 0;
  bool started = runners.empty();
  bool running = !started;
  caf::error failure;
  auto start = [&] {
    started = true;
    for (auto& r : runners)
      ask_batch(r);
    running = outstanding();
  };
  self->receive_while([&] { return running; })(
    [&](trajectory_batch& b) {
      auto slot = std::find_if(runners.begin(), runners.end(),
                               [&](const runner_slot& r) { return r.name == b.runner; });
      if (slot == runners.end() || !slot->outstanding)
        return;
      slot->outstanding = false;
      if (slot->guest && !slot->guest_batches) {
        slot->guest_batches = true;
        write_log(w.opts.log, fmt::format("learner '{}': first batch from guest runner "
                                          "'{}' ({} steps of {} environments)",
                                          w.opts.name, b.runner, b.steps, b.num_envs));
      }
      if (w.opts.pipelined)
        ask_batch(*slot);
      if (const size_t bad = count_non_finite(b); bad > 0) {
        // The runner kept this batch's moments from the keeper; the learner
        // keeps it from the weights.
        w.non_finite += bad;
        write_log(w.opts.log,
                  fmt::format("learner '{}': {}: batch {} of '{}' has {} non-finite "
                              "observation or reward value(s); skipped",
                              w.opts.name, b.env_id, b.sequence, b.runner, bad));
        learner_report skipped;
        skipped.learner = w.opts.name;
        skipped.env_steps = b.steps * b.num_envs;
        skipped.weights_version = w.version;
        skipped.runner_restarts = w.restarts;
        skipped.non_finite = w.non_finite;
        skipped.skipped = true;
        self->send(w.metrics, std::move(skipped));
        if (!w.opts.pipelined)
          ask_batch(*slot);
        running = outstanding();
        return;
      }
      auto behavior = w.store->at(b.policy_version);
      if (!behavior || w.opts.algo == algorithm::a3c || b.behavior_recorded)
        behavior =
          std::make_shared<policy_snapshot>(policy_snapshot{w.version, w.current});
      learner_report rep;
      rep.learner = w.opts.name;
      rep.env_steps = b.steps * b.num_envs;
      rep.policy_lag = w.version > b.policy_version ? w.version - b.policy_version : 0;
      rep.stats_version = b.stats_version;
      if (w.view) {
        const uint64_t latest = w.view->published_version();
        rep.stats_lag = latest > b.stats_version ? latest - b.stats_version : 0;
      }
      const double lr = scheduled_lr(w);
      step_totals totals;
      w.batch_env_steps = b.steps * b.num_envs;
      bool ok = w.opts.algo == algorithm::impala
                  ? learn_impala(self, w, b, behavior->model, lr, totals)
                  : learn_ppo(self, w, b, behavior->model, lr, totals,
                              w.opts.algo == algorithm::a3c);
      if (!ok) {
        failure = caf::make_error(caf::sec::runtime_error, "learner failed");
        running = false;
        return;
      }
      if (w.drained) {
        // Not learned (the server is draining): neither counted nor reported,
        // so that the final row matches the final checkpoint.
        running = false;
        return;
      }
      const double steps = static_cast<double>(std::max<uint64_t>(totals.steps, 1));
      rep.loss_policy = totals.policy / steps;
      rep.loss_value = totals.value / steps;
      rep.entropy = totals.entropy / steps;
      rep.learning_rate = lr;
      rep.dropped = totals.dropped;
      rep.rejected = totals.rejected;
      rep.weights_version = w.version;
      rep.runner_restarts = w.restarts;
      rep.non_finite = w.non_finite;
      rep.episode_returns = std::move(b.episode_returns);
      rep.episode_lengths = std::move(b.episode_lengths);
      self->send(w.metrics, std::move(rep));
      if (!w.opts.pipelined)
        ask_batch(*slot);
      running = outstanding();
    },
    [&](uint64_t) {}, // a runner's answer to collect_atom
    [&](runner_atom, uint64_t index, caf::actor& runner) {
      if (index >= runners.size())
        return;
      auto& r = runners[index];
      if (r.actor) {
        // A replacement: the lost batch's steps were claimed already, so it
        // is asked for again without claiming.
        r.restarts += 1;
        w.restarts += 1;
        r.actor = std::move(runner);
        if (r.outstanding)
          self->send(r.actor, collect_atom::value, uint64_t{1});
        return;
      }
      r.actor = std::move(runner);
      if (++assigned == runners.size() && !started)
        start();
    },
    [&](runner_atom, std::string& name, caf::actor& runner) {
      // A guest: a runner of an environment-only host. It is watched (its
      // host may be lost) and asked for batches like the learner's own.
      auto slot = std::find_if(runners.begin(), runners.end(),
                               [&](const runner_slot& r) { return r.name == name; });
      if (slot != runners.end() && !slot->guest)
        return; // a name of the learner's own runners: refused
      if (!runner)
        return;
      self->monitor(runner);
      if (slot != runners.end()) {
        slot->restarts += 1;
        slot->actor = std::move(runner);
        if (slot->outstanding)
          self->send(slot->actor, collect_atom::value, uint64_t{1});
        return;
      }
      runner_slot g;
      g.name = name;
      g.index = runners.size();
      g.guest = true;
      g.actor = std::move(runner);
      runners.push_back(std::move(g));
      write_log(w.opts.log,
                fmt::format("learner '{}': guest runner '{}' joins", w.opts.name, name));
      if (started && running)
        ask_batch(runners.back());
    },
    [&](caf::down_msg& down) {
      // A guest runner is gone: its batch under way is lost (its steps were
      // claimed, not learned).
      auto slot = std::find_if(runners.begin(), runners.end(), [&](const runner_slot& r) {
        return r.guest && r.actor && r.actor.address() == down.source;
      });
      if (slot == runners.end())
        return;
      write_log(w.opts.log,
                fmt::format("learner '{}': guest runner '{}' is gone ({})", w.opts.name,
                            slot->name, error_message(self->system(), down.reason)));
      runners.erase(slot);
      running = outstanding();
    },
    [&](stop_atom) { running = false; },
    [&](state_atom) {
      return learner_state{w.opts.name, w.gen.state()};
    },
    [&](caf::exit_msg& msg) {
      failure = msg.reason;
      running = false;
    });
  if (w.opts.report_to)
    self->send(w.opts.report_to, learner_state{w.opts.name, w.gen.state()});
  if (failure)
    self->fail_state(std::move(failure));
}

} // namespace

caf::actor spawn_learner(caf::actor_system& sys, learner_options opts, caf::actor server,
                         caf::actor metrics, std::shared_ptr<policy_store> store,
                         std::shared_ptr<step_budget> budget,
                         std::shared_ptr<learners::stats_view> view) {
  auto guarded = [](caf::blocking_actor* self, learner_options opts, caf::actor server,
                    caf::actor metrics, std::shared_ptr<policy_store> store,
                    std::shared_ptr<step_budget> budget,
                    std::shared_ptr<learners::stats_view> view) {
    const auto who = fmt::format("learner '{}'", opts.name);
    const auto log = opts.log;
    run_converting_exceptions(self, who, log, [&] {
      learner_loop(self, std::move(opts), std::move(server), std::move(metrics),
                   std::move(store), std::move(budget), std::move(view));
    });
  };
  return sys.spawn<caf::detached>(guarded, std::move(opts), std::move(server),
                                  std::move(metrics), std::move(store), std::move(budget),
                                  std::move(view));
}

} // namespace troupe::actors
