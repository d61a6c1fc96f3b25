#include "actors/learner.hpp"
#include "actors/exceptions.hpp"
#include "actors/log.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "base/rng.hpp"
#include "learners/algorithm.hpp"
#include "learners/backend.hpp"
#include "learners/optimizer.hpp"

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
  base::rng gen;
  uint64_t env_steps_learned = 0;
  uint64_t restarts = 0;
  // The batch being learned: its environment steps go with its last gradient,
  // so that the parameter server's counters match its weights.
  uint64_t batch_env_steps = 0;
  bool drained = false; // the server stopped applying: the run is stopping
  uint64_t non_finite = 0;
  std::unique_ptr<learners::algorithm> algorithm;
  // gradients_in_flight = 1: the answer to the gradient sent last, not taken yet
  using push_handle = decltype(std::declval<caf::blocking_actor&>().request(
    std::declval<const caf::actor&>(), caf::infinite, std::declval<gradient_update>()));
  std::optional<push_handle> in_flight;
  // local_optimizer: the backend holds the weights and Adam's state; the
  // server hears of them once per batch (hand_off).
  bool local = false;
  uint64_t local_base = 0;     // the server's version the steps started from
  uint64_t local_taken = 0;    // steps taken since
  uint64_t local_rejected = 0; // gradients not applied since (non-finite)
  // per-batch scratch
  std::vector<float> grad;
  std::vector<learners::stats_view*> bn_views;
  std::vector<float> scratch_params, scratch_buffers;
};

// Global batch norm: the running statistics the next step normalizes with
// come from the keeper's views.
bool load_weights(learner_work& w) {
  // local_optimizer: the backend's weights are the newest already.
  if (!w.local)
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

size_t count_non_finite(const trajectory_batch& b) {
  size_t bad = 0;
  for (float x : b.observations)
    bad += !std::isfinite(x);
  for (float x : b.rewards)
    bad += !std::isfinite(x);
  return bad;
}

struct step_totals {
  uint64_t dropped = 0, rejected = 0;
};

// Takes the server's answer to a gradient: its weights, and whether it was
// applied, dropped, refused or the run is draining.
template <class Handle>
status take_answer(caf::blocking_actor* self, learner_work& w, Handle& answer,
                   step_totals& totals) {
  status fine;
  answer.receive(
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
      fine = make_error(errc::unavailable, "parameter server: {}",
                        error_message(self->system(), e));
    });
  return fine;
}

// gradients_in_flight: takes the answer to the gradient still in flight, if any.
status finish_push(learner_work& w, step_totals& totals) {
  if (!w.in_flight)
    return ok_status();
  auto answer = std::move(*w.in_flight);
  w.in_flight.reset();
  return take_answer(answer.self(), w, answer, totals);
}

// Global batch norm: the last forward pass's layer moments go to the keeper.
void send_moments(caf::blocking_actor* self, learner_work& w) {
  if (w.bn_views.empty() || !w.opts.keeper)
    return;
  const auto& layers = w.backend->batch_moments();
  const auto names = w.current.batch_norm_layers();
  for (size_t i = 0; i < layers.size() && i < names.size(); ++i)
    if (layers[i].count > 0)
      self->send(w.opts.keeper,
                 moments_delta{names[i].prefix, w.opts.name, layers[i].count,
                               layers[i].mean, layers[i].m2});
}

// local_optimizer: takes the server's weights and Adam's state into the
// backend; false (with the reason logged) when the backend cannot take them.
bool take_server_state(caf::blocking_actor* self, learner_work& w) {
  std::optional<parameter_server_state> got;
  std::string why;
  self->request(w.server, caf::infinite, state_atom::value)
    .receive([&](parameter_server_state& st) { got = std::move(st); },
             [&](caf::error& e) { why = error_message(self->system(), e); });
  if (!got) {
    write_log(w.opts.log,
              fmt::format("learner '{}': no state from the parameter server: {}",
                          w.opts.name, why));
    return false;
  }
  auto& st = *got;
  if (st.params.size() != w.current.param_count() ||
      st.buffers.size() != w.current.buffer_count() ||
      st.adam_m.size() != st.params.size() || st.adam_v.size() != st.params.size()) {
    write_log(w.opts.log,
              fmt::format("learner '{}': the parameter server's state has {} parameters, "
                          "the model {}",
                          w.opts.name, st.params.size(), w.current.param_count()));
    return false;
  }
  std::copy(st.params.begin(), st.params.end(), w.current.params());
  if (!st.buffers.empty())
    std::copy(st.buffers.begin(), st.buffers.end(), w.current.buffers());
  w.buffers = st.buffers;
  w.version = st.version;
  if (auto ok = w.backend->load(w.current.params(), w.current.buffers()); !ok)
    return false;
  if (auto ok =
        w.backend->write_optimizer(st.adam_m.data(), st.adam_v.data(), st.adam_steps);
      !ok) {
    write_log(w.opts.log,
              fmt::format("learner '{}': {}; each gradient goes to the parameter server",
                          w.opts.name, ok.err().message));
    return false;
  }
  w.local_base = st.version;
  w.local_taken = w.local_rejected = 0;
  return true;
}

// local_optimizer: hands the batch's steps (the weights and Adam's state
// after them) to the server and takes its answer.
status hand_off(caf::blocking_actor* self, learner_work& w, step_totals& totals) {
  local_steps out;
  out.learner = w.opts.name;
  out.base_version = w.local_base;
  out.steps = w.local_taken;
  out.rejected = w.local_rejected;
  out.batch_env_steps = w.batch_env_steps;
  const size_t n = w.current.param_count();
  out.params.resize(n);
  out.buffers.resize(w.current.buffer_count());
  out.adam_m.resize(n);
  out.adam_v.resize(n);
  if (auto ok = w.backend->store(out.params.data(), out.buffers.data()); !ok)
    return ok;
  if (auto ok =
        w.backend->read_optimizer(out.adam_m.data(), out.adam_v.data(), &out.adam_steps);
      !ok)
    return ok;
  status fine;
  bool refused = false;
  self->request(w.server, caf::infinite, std::move(out))
    .receive(
      [&](weights_reply& r) {
        if (r.draining)
          w.drained = true;
        else if (r.rejected)
          refused = true;
        take_weights(w, r);
      },
      [&](caf::error& e) {
        fine = make_error(errc::unavailable, "parameter server: {}",
                          error_message(self->system(), e));
      });
  if (!fine || w.drained)
    return fine;
  if (refused) {
    // The weights moved under us (not a lone learner after all): the
    // server's state is taken again and the batch's steps are lost.
    totals.rejected += w.local_taken;
    if (!take_server_state(self, w))
      return make_error(errc::unavailable,
                        "learner '{}': cannot take the parameter server's state",
                        w.opts.name);
    return ok_status();
  }
  w.local_base = w.version;
  w.local_taken = w.local_rejected = 0;
  return ok_status();
}

// local_optimizer: applies the backend's gradient there (the server's clip
// and Adam), or counts it rejected when it holds a non-finite number, as
// the server would; the batch's last gradient hands the steps over.
status step_locally(caf::blocking_actor* self, learner_work& w, double lr, bool last,
                    step_totals& totals) {
  // The backend applies none with a NaN or an infinity (its norm shows it).
  auto norm = w.backend->apply_gradient(lr, w.opts.max_grad_norm);
  if (!norm)
    return norm.err();
  if (std::isfinite(*norm)) {
    w.version += 1;
    w.local_taken += 1;
  } else {
    w.local_rejected += 1;
    totals.rejected += 1;
  }
  send_moments(self, w);
  if (!last)
    return ok_status();
  return hand_off(self, w, totals);
}

// Sends the backend's gradient to the server and takes the weights it answers.
status push_gradient(caf::blocking_actor* self, learner_work& w, uint64_t samples,
                     double lr, bool last, step_totals& totals) {
  w.grad.resize(w.current.param_count());
  if (auto ok = w.backend->read_gradient(w.grad.data()); !ok)
    return ok;
  gradient_update g{w.opts.name, w.version, samples, lr, w.grad, {}, 0};
  if (const auto& c = w.opts.cluster; c && c->incarnation != 0 && c->gradient_sequence) {
    g.worker = c->worker;
    g.incarnation = c->incarnation;
    g.sequence = ++*c->gradient_sequence;
  }
  if (last)
    g.batch_env_steps = w.batch_env_steps;
  if (w.current.buffer_count() > 0) {
    // Batch norm: the running statistics go with the gradient (global: as
    // read from the views; local: as this learner's batches moved them).
    w.scratch_params.resize(w.current.param_count());
    w.scratch_buffers.resize(w.current.buffer_count());
    if (w.backend->store(w.scratch_params.data(), w.scratch_buffers.data()))
      g.buffers = w.scratch_buffers;
  }
  send_moments(self, w);
  if (w.opts.cluster && w.opts.cluster->gradients_in_flight > 0) {
    // The answer to the previous gradient (likely here already: it crossed
    // the wire while this one was computed) brings the weights the next one
    // is computed on; this one goes out without waiting for its own.
    if (auto ok = finish_push(w, totals); !ok)
      return ok;
    w.in_flight.emplace(self->request(w.server, caf::infinite, std::move(g)));
    return ok_status();
  }
  auto answer = self->request(w.server, caf::infinite, std::move(g));
  return take_answer(self, w, answer, totals);
}

// What the algorithm draws on: the backend, the shuffling generator, and the
// parameter server's round trip for each gradient.
class learner_host final : public learners::update_host {
public:
  learner_host(caf::blocking_actor* self, learner_work& w, double lr)
    : self_(self), w_(w), lr_(lr) {}
  learners::learner_backend& backend() override { return *w_.backend; }
  base::rng& generator() override { return w_.gen; }
  status load_weights() override {
    if (!actors::load_weights(w_))
      return make_error(errc::device_error, "cannot load the weights into the backend");
    return ok_status();
  }
  status push_gradient(size_t samples, bool last) override {
    if (w_.local)
      return step_locally(self_, w_, lr_, last, totals);
    return actors::push_gradient(self_, w_, samples, lr_, last, totals);
  }
  std::optional<learners::local_step_settings> local_steps() override {
    if (!w_.local)
      return std::nullopt;
    return learners::local_step_settings{lr_, w_.opts.max_grad_norm};
  }
  status finish_local_update(size_t taken, size_t rejected) override {
    if (!w_.local)
      return make_error(errc::unavailable,
                        "learner '{}' sends its gradients to the parameter server",
                        w_.opts.name);
    w_.version += taken;
    w_.local_taken += taken;
    w_.local_rejected += rejected;
    totals.rejected += rejected;
    send_moments(self_, w_);
    return hand_off(self_, w_, totals);
  }
  step_totals totals;

private:
  caf::blocking_actor* self_;
  learner_work& w_;
  double lr_;
};

learners::rollout_view view_of(const trajectory_batch& b) {
  learners::rollout_view v;
  v.steps = b.steps;
  v.envs = b.num_envs;
  v.obs_dim = b.obs_dim;
  v.action_dim = b.action_dim;
  v.observations = b.observations.data();
  v.actions = b.actions.data();
  v.rewards = b.rewards.data();
  v.terminated = b.terminated.data();
  v.truncated = b.truncated.data();
  v.autoreset = b.autoreset.data();
  v.behavior_logp = b.behavior_logp.empty() ? nullptr : b.behavior_logp.data();
  v.behavior_logp_count = b.behavior_logp.size();
  v.behavior_recorded = b.behavior_recorded;
  return v;
}

// The batch's arrays hold what its shape says (a malformed batch is refused
// before an algorithm indexes into it).
status check_shape(const trajectory_batch& b) {
  const size_t rows = b.steps * b.num_envs;
  if (b.observations.size() != (rows + b.num_envs) * b.obs_dim ||
      b.actions.size() != rows * b.action_dim || b.rewards.size() != rows ||
      b.terminated.size() != rows || b.truncated.size() != rows ||
      b.autoreset.size() != rows)
    return make_error(errc::dimension_mismatch,
                      "a batch of {} steps x {} environments must hold {} observation "
                      "floats, {} action floats and {} rewards and flags; it holds {}, "
                      "{} and {}",
                      b.steps, b.num_envs, (rows + b.num_envs) * b.obs_dim,
                      rows * b.action_dim, rows, b.observations.size(), b.actions.size(),
                      b.rewards.size());
  return ok_status();
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
  bo.threads = std::max(1u, w.opts.compute_threads);
  bo.split_networks = bo.threads >= 2;
  if (auto made = learners::make_backend(w.opts.device, w.opts.spec, w.opts.adam, bo))
    w.backend = std::move(*made);
  else {
    write_log(w.opts.log, fmt::format("learner '{}': {}; computing on the CPU",
                                      w.opts.name, made.err().message));
    w.backend = learners::make_cpu_backend(w.opts.spec, w.opts.adam, bo);
  }
  if (auto made = learners::make_algorithm(w.opts.spec, w.opts.algorithm))
    w.algorithm = std::move(*made);
  else {
    write_log(w.opts.log,
              fmt::format("learner '{}': {}", w.opts.name, made.err().message));
    self->fail_state(caf::make_error(caf::sec::runtime_error, "learner failed"));
    return;
  }
  w.local = w.opts.local_optimizer && take_server_state(self, w);
  if (!w.local)
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
  // A checkpoint's cut: the learner's state is answered once it has learned
  // (or skipped) every batch the held runners had sent.
  std::map<std::string, uint64_t>
    learned_next; // per runner: the last batch's sequence + 1
  std::optional<std::pair<caf::typed_response_promise<learner_state>, held_runners>>
    hold_answer;
  auto has_learned = [&](const held_runners& h) {
    for (size_t i = 0; i < h.names.size() && i < h.next_sequence.size(); ++i) {
      const bool mine =
        std::any_of(runners.begin(), runners.end(),
                    [&](const runner_slot& r) { return r.name == h.names[i]; });
      if (!mine || h.next_sequence[i] == 0)
        continue;
      auto it = learned_next.find(h.names[i]);
      if (it == learned_next.end() || it->second < h.next_sequence[i])
        return false;
    }
    return true;
  };
  auto answer_hold = [&](bool anyway) {
    if (hold_answer && (anyway || has_learned(hold_answer->second))) {
      hold_answer->first.deliver(learner_state{w.opts.name, w.gen.state()});
      hold_answer.reset();
    }
  };
  // A guest: a runner of an environment-only host, handed here by the
  // coordinator's supervisor or by a learner host's feed door (`handoff`: the
  // environment-only host's count of its hand-offs of that runner, 0 from a
  // supervisor). It is watched (its host may be lost) and asked for batches
  // like the learner's own.
  auto take_guest = [&](const std::string& name, caf::actor& runner, uint64_t handoff) {
    auto slot = std::find_if(runners.begin(), runners.end(),
                             [&](const runner_slot& r) { return r.name == name; });
    if (slot != runners.end() && !slot->guest)
      return; // a name of the learner's own runners: refused
    if (!runner)
      return;
    self->monitor(runner);
    // The runner's batches come here from now on, unless a later hand-off
    // has taken it elsewhere (before the first ask: messages between two
    // actors keep their order).
    self->send(runner, consumer_atom::value, handoff);
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
  };
  self->receive_while([&] { return running; })(
    [&](trajectory_batch& b) {
      auto slot = std::find_if(runners.begin(), runners.end(),
                               [&](const runner_slot& r) { return r.name == b.runner; });
      if (slot == runners.end() || !slot->outstanding)
        return;
      slot->outstanding = false;
      // Whichever way this handler returns, the batch is dealt with then.
      struct after_batch {
        std::function<void()> done;
        ~after_batch() { done(); }
      } after{[&, name = b.runner, next = b.sequence + 1] {
        learned_next[name] = next;
        answer_hold(false);
      }};
      if (slot->guest && !slot->guest_batches) {
        slot->guest_batches = true;
        write_log(w.opts.log, fmt::format("learner '{}': first batch from guest runner "
                                          "'{}' ({} steps of {} environments)",
                                          w.opts.name, b.runner, b.steps, b.num_envs));
      }
      if (w.opts.pipelined)
        ask_batch(*slot);
      // A batch that cannot be learned is skipped (its steps are counted,
      // nothing is learned): non-finite values (the runner kept its moments
      // from the keeper, the learner keeps it from the weights), or one that
      // does not meet the algorithm's requirements.
      auto skip = [&](const std::string& why) {
        write_log(w.opts.log,
                  fmt::format("learner '{}': {}: batch {} of '{}': {}; skipped",
                              w.opts.name, b.env_id, b.sequence, b.runner, why));
        learner_report skipped;
        skipped.learner = w.opts.name;
        skipped.env_steps = b.steps * b.num_envs;
        skipped.weights_version = w.version;
        skipped.runner_restarts = w.restarts;
        skipped.non_finite = w.non_finite;
        skipped.skipped = true;
        skipped.obs_shift_kl = b.obs_shift_kl;
        skipped.obs_drift_kl = b.obs_drift_kl;
        skipped.return_std_shift = b.return_std_shift;
        skipped.return_std_drift = b.return_std_drift;
        skipped.env_counters = std::move(b.env_counters);
        self->send(w.metrics, std::move(skipped));
        if (!w.opts.pipelined)
          ask_batch(*slot);
        running = outstanding();
      };
      if (const size_t bad = count_non_finite(b); bad > 0) {
        w.non_finite += bad;
        skip(fmt::format("{} non-finite observation or reward value(s)", bad));
        return;
      }
      if (auto ok = check_shape(b); !ok) {
        skip(ok.err().message);
        return;
      }
      auto view = view_of(b);
      if (auto ok = w.algorithm->check_batch(view); !ok) {
        skip(ok.err().message);
        return;
      }
      auto behavior = w.algorithm->uses_acting_weights() && !b.behavior_recorded
                        ? w.store->at(b.policy_version)
                        : nullptr;
      if (!behavior)
        behavior =
          std::make_shared<policy_snapshot>(policy_snapshot{w.version, w.current});
      view.acting_version_kept = behavior->version == b.policy_version;
      learner_report rep;
      rep.learner = w.opts.name;
      rep.env_steps = b.steps * b.num_envs;
      rep.policy_lag = w.version > b.policy_version ? w.version - b.policy_version : 0;
      rep.stats_version = b.stats_version;
      rep.reward_stats_version = b.reward_stats_version;
      rep.obs_shift_kl = b.obs_shift_kl;
      rep.obs_drift_kl = b.obs_drift_kl;
      rep.return_std_shift = b.return_std_shift;
      rep.return_std_drift = b.return_std_drift;
      if (w.view) {
        const uint64_t latest = w.view->published_version();
        rep.stats_lag = latest > b.stats_version ? latest - b.stats_version : 0;
      }
      const double lr = scheduled_lr(w);
      learner_host host(self, w, lr);
      w.batch_env_steps = b.steps * b.num_envs;
      auto learned = w.algorithm->update(view, behavior->model, host);
      if (!learned) {
        write_log(w.opts.log, fmt::format("learner '{}': {}: {}", w.opts.name,
                                          w.algorithm->name(), learned.err().message));
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
      const auto& totals = host.totals;
      rep.loss_policy = learned->policy_loss;
      rep.loss_value = learned->value_loss;
      rep.entropy = learned->entropy;
      rep.learning_rate = lr;
      rep.dropped = totals.dropped;
      rep.rejected = totals.rejected;
      rep.weights_version = w.version;
      rep.runner_restarts = w.restarts;
      rep.non_finite = w.non_finite;
      rep.episode_returns = std::move(b.episode_returns);
      rep.episode_lengths = std::move(b.episode_lengths);
      rep.episode_reward_terms = std::move(b.episode_reward_terms);
      rep.env_counters = std::move(b.env_counters);
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
      take_guest(name, runner, 0);
    },
    [&](runner_atom, std::string& name, caf::actor& runner, uint64_t handoff) {
      take_guest(name, runner, handoff);
    },
    [&](caf::error& e) {
      // A guest runner's end of this learner's request: its host's feed handed
      // it to another learner (a learner host joined, or this one's request
      // was cut short). The slot goes, and the batch asked of it is given
      // back to the budget.
      const auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
      auto slot = std::find_if(runners.begin(), runners.end(), [&](const runner_slot& r) {
        return r.guest && r.actor && r.actor.address() == from;
      });
      if (slot == runners.end())
        return;
      write_log(w.opts.log,
                fmt::format("learner '{}': guest runner '{}' left it ({})", w.opts.name,
                            slot->name, error_message(self->system(), e)));
      if (slot->outstanding)
        w.budget->release(runner_steps(w.opts, slot->index));
      self->demonitor(slot->actor);
      runners.erase(slot);
      running = outstanding();
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
    [&](held_runners& h) -> caf::result<learner_state> {
      if (has_learned(h))
        return learner_state{w.opts.name, w.gen.state()};
      answer_hold(true); // an earlier one, given up on by its asker
      hold_answer.emplace(self->make_response_promise<learner_state>(), std::move(h));
      return hold_answer->first;
    },
    [&](caf::exit_msg& msg) {
      failure = msg.reason;
      running = false;
    });
  if (w.in_flight) {
    // The last gradient's answer, so that it is applied (or refused) before
    // this learner is reported ended.
    step_totals late;
    if (auto ok = finish_push(w, late); !ok)
      write_log(w.opts.log,
                fmt::format("learner '{}': {}", w.opts.name, ok.err().message));
  }
  answer_hold(true);
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
