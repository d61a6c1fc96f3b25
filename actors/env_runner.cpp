#include "actors/env_runner.hpp"
#include "actors/collect_protocol.hpp"
#include "actors/exceptions.hpp"
#include "actors/log.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/rng.hpp"
#include "kernels/moments.hpp"
#include "learners/model.hpp"

namespace troupe::actors {

policy_fn make_random_policy(const envs::space& action_space) {
  // The log-probability of every draw is the same: -log n, or -log of the box volume.
  double lp = 0;
  if (action_space.kind == envs::space_kind::discrete)
    lp = -std::log(static_cast<double>(action_space.n));
  else
    for (size_t j = 0; j < action_space.size(); ++j)
      lp -= std::log(static_cast<double>(action_space.high[j]) - action_space.low[j]);
  return [space = action_space, lp](const float*, size_t num_envs, base::rng& gen,
                                    float* actions, float* logp) {
    const size_t ad = space.size();
    for (size_t i = 0; i < num_envs; ++i) {
      if (space.kind == envs::space_kind::discrete) {
        auto k = static_cast<int64_t>(gen.unit() * static_cast<double>(space.n));
        actions[i] = static_cast<float>(std::min(k, space.n - 1));
      } else {
        for (size_t j = 0; j < ad; ++j)
          actions[i * ad + j] = std::min(
            static_cast<float>(gen.uniform(space.low[j], space.high[j])), space.high[j]);
      }
      if (logp)
        logp[i] = static_cast<float>(lp);
    }
    return uint64_t{0};
  };
}

float normalize_reward(float reward, double var, double epsilon, double clip) noexcept {
  double z = static_cast<double>(reward) / std::sqrt(var + epsilon);
  if (clip > 0)
    z = std::clamp(z, -clip, clip);
  return static_cast<float>(z);
}

namespace {

struct runner_state {
  env_runner_options opts;
  std::shared_ptr<envs::vector_env> env;
  policy_fn policy;
  base::rng gen; // the policy's randomness
  caf::actor consumer;
  uint64_t handoff = 0; // a guest's: the hand-off of its consumer (consumer_atom)
  caf::actor keeper;
  std::shared_ptr<learners::stats_view> view;
  std::shared_ptr<learners::stats_view> return_view; // reward_norm: the "ret" stream
  env_runner_status status;
  std::vector<double> episode_return; // running return of each environment
  std::vector<uint64_t> episode_length;
  std::vector<double> episode_terms;     // [N x K] reward-term sums of each episode
  std::vector<uint8_t> terms_whole;      // [N] episode_terms cover the whole episode
  std::vector<uint64_t> counters_seen;   // the env's counters after the last batch
  std::vector<double> discounted_return; // reward_norm: [N], Gymnasium's accumulator
  std::vector<double> batch_returns;     // ... its value after each transition of a batch
  kernels::moments return_moments{1};    // ... their moments, for the keeper
  bool return_delta_ready = false;
  std::vector<float> raw_observations; // [T x N x obs_dim], for the moments
  std::vector<float> env_actions;      // clip_box_actions: what the environments get
  kernels::moments batch_moments;
  bool delta_ready = false;            // batch_moments hold a clean batch not yet sent
  kernels::moments local_moments;      // local_obs_stats: every clean batch's
  learners::stats_snapshot local_snap; // ... and what normalizes the next
  learners::stats_snapshot fold_snap;  // norm_every_step: what normalizes this step
  kernels::moments fold_moments;       // ... the batch's clean steps so far
  kernels::moments fold_step;          // ... and this step's
  kernels::moments local_returns{1};   // local_return_stats: every clean batch's returns
  double slow_debt_ns = 0;             // slowdown: the wait owed so far
  // norm_diagnostics: the normalizers the previous batch used, and how many
  // clean rows of raw_observations it left (0: none to measure on).
  std::optional<learners::stats_snapshot> diag_snap;
  double diag_return_var = NAN;
  size_t diag_rows = 0;
  std::vector<float> diag_a, diag_b;
  collect_request request;
  // A checkpoint's hold: no batch is started while held (a due one waits in
  // `deferred`); a hold asked for before `hold_at` batches answers once the
  // runner has sent them.
  bool held = false;
  bool deferred = false;
  uint64_t hold_at = 0;
  std::optional<caf::typed_response_promise<env_runner_state>> hold_pending;
};

using runner_actor = caf::stateful_actor<runner_state>;

// Writes the observations the policy sees: a copy, or normalized with the
// snapshot's mean and variance.
void policy_view(const float* raw, size_t rows, size_t dim,
                 const learners::stats_snapshot* snap, const env_runner_options& o,
                 float* out) {
  if (!snap) {
    std::copy(raw, raw + rows * dim, out);
    return;
  }
  // actor_critic::evaluate's formula, so that a policy acts on the same values
  // here as when it is evaluated from a checkpoint.
  const double clip = o.obs_clip > 0 ? o.obs_clip : INFINITY;
  learners::normalize_observations(raw, rows, dim, snap->mean.data(), snap->var.data(),
                                   o.obs_epsilon, clip, out);
}

// The moments of a batch's discounted returns (float64, corrected two-pass).
kernels::moments return_moments_of(const std::vector<double>& x) {
  kernels::moments m(1);
  m.count = x.size();
  double sum = 0;
  for (double v : x)
    sum += v;
  const double mean = sum / static_cast<double>(x.size());
  double sq = 0, dev = 0;
  for (double v : x) {
    sq += (v - mean) * (v - mean);
    dev += v - mean;
  }
  m.mean[0] = mean;
  m.m2[0] = std::max(0.0, sq - dev * dev / static_cast<double>(x.size()));
  return m;
}

uint64_t now_ns(const env_runner_options& o) {
  if (o.clock_ns)
    return o.clock_ns();
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count());
}

// Waits out what the slowdown owes (whole nanoseconds; the fraction stays owed).
void pay_slowdown(runner_state& st) {
  const double whole = std::floor(st.slow_debt_ns);
  if (whole < 1.0)
    return;
  st.slow_debt_ns -= whole;
  const auto ns = static_cast<uint64_t>(whole);
  if (st.opts.wait_ns)
    st.opts.wait_ns(ns);
  else
    std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
}

// The return standard deviation rewards are divided by, for a variance.
double return_std(double var, const env_runner_options& o) {
  return std::sqrt(var + o.reward_epsilon);
}

// norm_diagnostics: what changing the normalizers does to the policy,
// measured on the previous batch's clean raw observations (still in
// raw_observations) before this batch overwrites them.
void measure_normalizers(runner_state& st, const learners::stats_snapshot* snap,
                         bool reward_norm, double return_var, trajectory_batch& b) {
  const size_t od = st.env->obs_dim(), rows = st.diag_rows;
  const float* raw = st.raw_observations.data();
  auto kl = [&](const learners::stats_snapshot& x,
                const learners::stats_snapshot& y) -> double {
    st.diag_a.resize(rows * od);
    st.diag_b.resize(rows * od);
    policy_view(raw, rows, od, &x, st.opts, st.diag_a.data());
    policy_view(raw, rows, od, &y, st.opts, st.diag_b.data());
    auto d = st.opts.divergence(st.diag_a.data(), st.diag_b.data(), rows);
    return d ? *d : NAN;
  };
  if (snap && !st.opts.local_obs_stats)
    b.obs_drift_kl = 0.0; // it acts with the global normalizer
  if (snap && rows > 0 && st.opts.divergence) {
    if (st.diag_snap)
      b.obs_shift_kl =
        st.diag_snap->version == snap->version && st.diag_snap->count == snap->count
          ? 0.0
          : kl(*st.diag_snap, *snap);
    if (st.opts.local_obs_stats) {
      const auto& global = st.view->read();
      if (global.mean.size() == od && global.var.size() == od)
        b.obs_drift_kl = kl(*snap, global);
    }
  }
  if (snap)
    st.diag_snap = *snap;
  if (reward_norm) {
    if (std::isfinite(st.diag_return_var))
      b.return_std_shift = std::abs(std::log(return_std(return_var, st.opts) /
                                             return_std(st.diag_return_var, st.opts)));
    if (!st.opts.local_return_stats) {
      b.return_std_drift = 0.0;
    } else {
      const auto& global = st.return_view->read();
      if (!global.var.empty())
        b.return_std_drift =
          std::log(return_std(return_var, st.opts) / return_std(global.var[0], st.opts));
    }
    st.diag_return_var = return_var;
  }
}

// norm_every_step: `out` becomes `base` merged with the batch's raw moments so
// far (Chan's parallel update, population variances); `out` is base's size.
// An initial snapshot (count 0: mean 0, variance 1) weighs nothing.
void fold_snapshot(const learners::stats_snapshot& base, const kernels::moments& so_far,
                   learners::stats_snapshot& out) {
  out.mean = base.mean;
  out.count = base.count;
  if (so_far.count == 0) {
    out.var = base.var;
    return;
  }
  const size_t dim = so_far.dim();
  out.var.resize(dim);
  const double na = static_cast<double>(base.count);
  for (size_t j = 0; j < dim; ++j) // out.var holds M2 until the division
    out.var[j] = base.var[j] * na;
  kernels::merge(out.count, out.mean.data(), out.var.data(), so_far.count,
                 so_far.mean.data(), so_far.m2.data(), dim);
  const double inv = 1.0 / static_cast<double>(out.count);
  for (size_t j = 0; j < dim; ++j)
    out.var[j] *= inv;
}

// norm_every_step's return statistics: the batch's start (count, mean,
// variance) and the discounted returns since, by Welford's update.
struct return_fold {
  uint64_t base_count = 0;
  double base_mean = 0, base_var = 1;
  uint64_t count = 0;
  double mean = 0, m2 = 0;

  void add(double x) {
    count += 1;
    const double d = x - mean;
    mean += d / static_cast<double>(count);
    m2 += d * (x - mean);
  }
  // The variance of the start's returns and the batch's together.
  double variance() const {
    if (count == 0)
      return base_var;
    uint64_t n = base_count;
    double mean_all = base_mean, m2_all = base_var * static_cast<double>(base_count);
    kernels::merge(n, &mean_all, &m2_all, count, &mean, &m2, 1);
    return m2_all / static_cast<double>(n);
  }
};

// Collects one batch of T steps; returns an error when a step fails.
result<trajectory_batch> collect(runner_state& st) {
  auto& env = *st.env;
  const size_t n = env.num_envs(), od = env.obs_dim(), ad = env.action_dim();
  const size_t steps = st.opts.steps_per_batch;
  trajectory_batch b =
    shaped_batch(st.opts.name, env.spec().id, st.status.batches, n, steps, od, ad);
  st.raw_observations.resize(steps * n * od);

  // One snapshot per batch, whose version the batch names: it normalizes the
  // whole batch, or with norm_every_step it is where each step's statistics start.
  const learners::stats_snapshot* snap = nullptr;
  if (st.view) {
    snap = &st.view->read();
    b.stats_version = snap->version;
    b.normalized = true;
    if (st.opts.local_obs_stats) {
      if (st.local_snap.mean.size() != od) { // mean 0, variance 1 until the first batch
        st.local_snap.mean.assign(od, 0.0);
        st.local_snap.var.assign(od, 1.0);
      }
      snap = &st.local_snap;
    }
  }
  // The return variance for the batch, like the observation snapshot.
  const bool reward_norm = st.opts.reward_norm && st.return_view;
  double return_var = 1.0;
  return_fold ret_fold;
  if (reward_norm) {
    const auto& rs = st.return_view->read();
    b.reward_stats_version = rs.version;
    if (st.opts.local_return_stats) {
      if (st.local_returns.count > 0) {
        return_var = st.local_returns.variance()[0];
        ret_fold.base_count = st.local_returns.count;
        ret_fold.base_mean = st.local_returns.mean[0];
      }
    } else if (!rs.var.empty()) {
      return_var = rs.var[0];
      ret_fold.base_count = rs.count;
      ret_fold.base_mean = rs.mean[0];
    }
    ret_fold.base_var = return_var;
  }
  if (st.opts.norm_diagnostics)
    measure_normalizers(st, snap, reward_norm, return_var, b);
  // norm_every_step: what normalizes step t, the snapshot merged with the
  // batch's clean steps up to t.
  const bool fold = st.opts.norm_every_step;
  const learners::stats_snapshot* const start_snap = snap;
  if (fold && snap) {
    fold_snapshot(*start_snap, kernels::moments(od), st.fold_snap);
    st.fold_moments = kernels::moments(od);
    snap = &st.fold_snap;
  }
  const bool slowed = st.opts.slowdown > 1.0;
  st.batch_returns.clear();
  const size_t terms = env.spec().reward_terms.size();
  uint64_t policy_version = UINT64_MAX;
  uint64_t non_finite = 0;
  size_t first_bad_env = 0, first_bad_step = 0;
  auto note_bad = [&](size_t t, size_t i) {
    if (non_finite++ == 0) {
      first_bad_step = t;
      first_bad_env = i;
    }
  };
  for (size_t t = 0; t < steps; ++t) {
    float* raw = &st.raw_observations[t * n * od];
    std::copy(env.observations(), env.observations() + n * od, raw);
    if (st.opts.obs_scale != 1.0)
      for (size_t k = 0; k < n * od; ++k)
        raw[k] = static_cast<float>(raw[k] * st.opts.obs_scale);
    for (size_t k = 0; k < n * od; ++k)
      if (!std::isfinite(raw[k]))
        note_bad(t, k / od);
    if (fold && start_snap && non_finite == 0) {
      kernels::compute_moments_into(raw, n, od, st.fold_step);
      kernels::merge(st.fold_moments, st.fold_step);
      fold_snapshot(*start_snap, st.fold_moments, st.fold_snap);
    }
    float* seen = &b.observations[t * n * od];
    policy_view(raw, n, od, snap, st.opts, seen);
    float* actions = &b.actions[t * n * ad];
    auto acted = st.policy(seen, n, st.gen, actions, &b.behavior_logp[t * n]);
    if (!acted)
      return make_error(acted.err().code,
                        "env runner '{}': the policy failed at step {} "
                        "of batch {}: {}",
                        st.opts.name, t, b.sequence, acted.err().message);
    policy_version = std::min(policy_version, *acted);
    const float* to_env = actions;
    const auto& space = env.spec().action_space;
    if (st.opts.clip_box_actions && space.kind == envs::space_kind::box) {
      st.env_actions.assign(actions, actions + n * ad);
      for (size_t i = 0; i < n; ++i)
        for (size_t j = 0; j < ad; ++j) {
          float& a = st.env_actions[i * ad + j];
          a = std::clamp(a, space.low[j], space.high[j]);
        }
      to_env = st.env_actions.data();
    }
    const uint64_t step_began = slowed ? now_ns(st.opts) : 0;
    if (auto ok = env.step(to_env); !ok)
      return make_error(ok.err().code,
                        "env runner '{}': {} failed at step {} of batch {}: {}",
                        st.opts.name, b.env_id, t, b.sequence, ok.err().message);
    if (slowed) {
      const uint64_t took = now_ns(st.opts) - step_began;
      st.slow_debt_ns += (st.opts.slowdown - 1.0) * static_cast<double>(took);
      if (st.slow_debt_ns >= static_cast<double>(st.opts.slowdown_wait_ns))
        pay_slowdown(st);
    }
    for (size_t i = 0; i < n; ++i) {
      const size_t k = t * n + i;
      b.rewards[k] = env.rewards()[i];
      b.terminated[k] = env.terminated()[i];
      b.truncated[k] = env.truncated()[i];
      b.autoreset[k] = env.autoreset()[i];
      if (!std::isfinite(b.rewards[k]))
        note_bad(t, i);
      if (b.autoreset[k])
        continue; // a reset, not a transition: the new episode starts here
      st.episode_return[i] += b.rewards[k]; // raw: metrics report raw returns
      st.episode_length[i] += 1;
      for (size_t j = 0; j < terms; ++j)
        st.episode_terms[i * terms + j] += env.reward_terms()[i * terms + j];
      if (reward_norm && std::isfinite(b.rewards[k])) {
        st.discounted_return[i] =
          next_discounted_return(st.discounted_return[i], b.rewards[k],
                                 b.terminated[k] != 0, st.opts.reward_gamma);
        st.batch_returns.push_back(st.discounted_return[i]);
        if (fold && non_finite == 0) {
          ret_fold.add(st.discounted_return[i]);
          return_var = ret_fold.variance();
        }
        b.rewards[k] = normalize_reward(b.rewards[k], return_var, st.opts.reward_epsilon,
                                        st.opts.reward_clip);
      }
      if (b.terminated[k] || b.truncated[k]) {
        b.episode_returns.push_back(st.episode_return[i]);
        b.episode_lengths.push_back(st.episode_length[i]);
        st.episode_return[i] = 0;
        st.episode_length[i] = 0;
        double* sums = st.episode_terms.data() + i * terms;
        for (size_t j = 0; j < terms; ++j)
          b.episode_reward_terms.push_back(st.terms_whole[i] ? sums[j] : NAN);
        std::fill_n(sums, terms, 0.0);
        st.terms_whole[i] = 1;
      }
    }
  }
  if (slowed)
    pay_slowdown(st); // the batch is late by what it still owes
  std::vector<float> last(env.observations(), env.observations() + n * od);
  if (st.opts.obs_scale != 1.0)
    for (auto& x : last)
      x = static_cast<float>(x * st.opts.obs_scale);
  policy_view(last.data(), n, od, snap, st.opts, &b.observations[steps * n * od]);
  b.policy_version = policy_version;
  if (!st.counters_seen.empty()) {
    std::vector<uint64_t> now(st.counters_seen.size());
    env.counters(now.data());
    b.env_counters.resize(now.size());
    for (size_t j = 0; j < now.size(); ++j)
      b.env_counters[j] = now[j] - st.counters_seen[j];
    st.counters_seen = std::move(now);
  }

  count_batch(st.status, b, non_finite);
  st.diag_rows = non_finite == 0 ? steps * n : 0;
  if (non_finite > 0) {
    write_log(st.opts.log,
              fmt::format("env runner '{}': {}: {} non-finite observation or reward "
                          "value(s) in batch {} (first: environment {}, step {}); "
                          "the batch's moments were not sent to the keeper",
                          st.opts.name, b.env_id, non_finite, b.sequence, first_bad_env,
                          first_bad_step));
  } else if (reward_norm && !st.batch_returns.empty() &&
             (st.keeper || st.opts.local_return_stats)) {
    st.return_moments = return_moments_of(st.batch_returns);
    st.return_delta_ready = static_cast<bool>(st.keeper);
    if (st.opts.local_return_stats)
      kernels::merge(st.local_returns, st.return_moments);
  }
  if (non_finite == 0 && (st.keeper || st.opts.local_obs_stats)) {
    kernels::compute_moments_into(st.raw_observations.data(), steps * n, od,
                                  st.batch_moments);
    if (st.keeper) {
      st.delta_ready = true;
      st.status.deltas_sent += 1;
    }
    if (st.opts.local_obs_stats) {
      if (st.local_moments.dim() != od)
        st.local_moments = kernels::moments(od);
      kernels::merge(st.local_moments, st.batch_moments);
      st.local_snap.version += 1;
      st.local_snap.count = st.local_moments.count;
      st.local_snap.mean = st.local_moments.mean;
      st.local_snap.var = st.local_moments.variance();
    }
  }
  return b;
}

// -- state --------------------------------------------------------------------

env_runner_state take_state(const runner_state& st) {
  env_runner_state out;
  out.runner = st.opts.name;
  out.env_id = st.env->spec().id;
  out.env = st.env->save_state();
  out.gen = st.gen.state();
  out.episode_return = st.episode_return;
  out.episode_length = st.episode_length;
  if (st.opts.reward_norm)
    out.discounted_return = st.discounted_return;
  out.status = st.status;
  return out;
}

// Checks the whole state first, so that a failure leaves runner and env as
// they were.
status restore_state(runner_state& st, const env_runner_state& in) {
  if (auto ok = check_runner_state(in, *st.env, st.opts.name); !ok)
    return ok;
  auto continued = continue_envs(*st.env, in, st.opts.seed);
  if (!continued)
    return continued.err();
  TROUPE_CHECK(st.gen.set_state(in.gen), "checked above");
  if (*continued) {
    st.episode_return = in.episode_return;
    st.episode_length = in.episode_length;
    // The reward terms of the episodes under way before the state are not
    // in it: those episodes report no term sums (NaN).
    for (size_t i = 0; i < st.terms_whole.size(); ++i)
      st.terms_whole[i] = st.episode_length[i] == 0;
    if (!in.discounted_return.empty())
      st.discounted_return = in.discounted_return;
  } else {
    write_log(
      st.opts.log,
      fmt::format("env runner '{}': {} saved no environment state: starting fresh "
                  "episodes at batch {} (episode returns under way restart at 0)",
                  st.opts.name, st.env->spec().id, in.status.batches));
  }
  st.status = in.status;
  st.status.runner = st.opts.name;
  st.status.env_id = st.env->spec().id;
  return {};
}

caf::behavior env_runner(runner_actor* self, env_runner_options opts,
                         std::shared_ptr<envs::vector_env> env, policy_fn policy,
                         caf::actor consumer, caf::actor keeper,
                         std::shared_ptr<learners::stats_view> view,
                         std::shared_ptr<learners::stats_view> return_view) {
  auto& st = self->state;
  st.opts = std::move(opts);
  st.env = std::move(env);
  st.policy = std::move(policy);
  st.gen.seed_with(st.opts.seed ^ policy_salt);
  st.consumer = std::move(consumer);
  st.keeper = std::move(keeper);
  st.view = std::move(view);
  st.return_view = std::move(return_view);
  st.status.runner = st.opts.name;
  st.status.env_id = st.env->spec().id;
  st.episode_return.assign(st.env->num_envs(), 0.0);
  st.episode_length.assign(st.env->num_envs(), 0);
  st.discounted_return.assign(st.env->num_envs(), 0.0);
  st.episode_terms.assign(st.env->num_envs() * st.env->spec().reward_terms.size(), 0.0);
  st.terms_whole.assign(st.env->num_envs(), 1);
  // A throwing policy or environment ends the runner with an error that says
  // what was thrown (its supervisor logs it and starts a replacement).
  // A collect request under way is answered with the error too.
  convert_exceptions(self, fmt::format("env runner '{}'", st.opts.name), st.opts.log,
                     [self](const caf::error& e) { self->state.request.fail(e); });
  if (st.opts.start_state) {
    auto restored = restore_state(st, *st.opts.start_state);
    st.opts.start_state.reset(); // not kept: it can be large
    if (!restored) {
      self->quit(to_caf_error(restored.err()));
      return {};
    }
  } else {
    st.env->reset(st.opts.seed);
  }
  // Batches carry the counters gained since this point: exact per runner,
  // whatever the vector env counted before (an earlier runner's steps).
  st.counters_seen.resize(st.env->spec().counters.size());
  if (!st.counters_seen.empty())
    st.env->counters(st.counters_seen.data());
  if (st.keeper) {
    const auto who = fmt::format("env runner '{}'", st.opts.name);
    declare_stream(self, st.keeper, who, st.opts.stats_stream, st.opts.log,
                   st.opts.stats_stream, static_cast<uint64_t>(st.env->obs_dim()));
    if (st.opts.reward_norm)
      declare_stream(self, st.keeper, who, st.opts.return_stream, st.opts.log,
                     stream_decl{st.opts.return_stream, 1, "cumulative", 0.99});
  }
  return {
    [self](collect_atom, uint64_t batches) -> caf::result<uint64_t> {
      auto& s = self->state;
      // Another host's runner answers only the learner it feeds now (the
      // last to send consumer_atom); a learner it left is told so.
      if (s.opts.guest &&
          caf::actor_cast<caf::actor>(self->current_sender()) != s.consumer)
        return to_caf_error(make_error(
          errc::unavailable, "env runner '{}' now feeds another learner", s.opts.name));
      return s.request.open(self, batches, fmt::format("env runner '{}'", s.opts.name),
                            [self] { self->send(self, next_atom::value); });
    },
    [self](consumer_atom, uint64_t handoff) {
      // A learner takes this guest runner over (its host's feed handed it on,
      // hand-off number `handoff`): the request of the learner before ends,
      // and its batches go to the sender from now on. A hand-off older than
      // the one it follows arrives late: that learner is told it lost the
      // runner (the runner's moves are ordered by its feed, not by which
      // learner's message arrives first).
      auto& s = self->state;
      auto from = caf::actor_cast<caf::actor>(self->current_sender());
      if (!s.opts.guest || !from || from == s.consumer) {
        s.handoff = std::max(s.handoff, handoff);
        return;
      }
      auto moved = to_caf_error(make_error(
        errc::unavailable, "env runner '{}' now feeds another learner", s.opts.name));
      if (handoff < s.handoff) {
        self->send(from, std::move(moved));
        return;
      }
      s.request.fail(moved);
      s.consumer = std::move(from);
      s.handoff = handoff;
    },
    [self](next_atom) {
      auto& s = self->state;
      if (!s.request.is_open())
        return;
      if (s.held) {
        s.deferred = true;
        return;
      }
      auto batch = collect(s);
      if (!batch) {
        // The environments are mid-batch: the runner ends, and its supervisor
        // starts a replacement.
        auto e = to_caf_error(batch.err());
        s.request.fail(e);
        self->quit(std::move(e));
        return;
      }
      if (s.delta_ready) {
        send_moments(self, s.keeper, s.opts.stats_stream, s.opts.name, s.batch_moments);
        s.delta_ready = false;
      }
      if (s.return_delta_ready) {
        send_moments(self, s.keeper, s.opts.return_stream, s.opts.name, s.return_moments);
        s.return_delta_ready = false;
      }
      self->send(s.consumer, std::move(*batch));
      if (s.request.sent())
        self->send(self, next_atom::value);
      if (s.hold_pending && s.status.batches >= s.hold_at) {
        s.held = true;
        s.hold_pending->deliver(take_state(s));
        s.hold_pending.reset();
      }
    },
    // Holds between two batches once `at` batches are sent, answering with
    // the state then; a batch due meanwhile waits for (release_atom).
    [self](hold_atom, uint64_t at) -> caf::result<env_runner_state> {
      auto& s = self->state;
      if (s.status.batches >= at) {
        s.held = true;
        return take_state(s);
      }
      s.hold_at = at;
      s.hold_pending = self->make_response_promise<env_runner_state>();
      return *s.hold_pending;
    },
    [self](release_atom) {
      auto& s = self->state;
      s.held = false;
      s.hold_pending.reset(); // a hold that was given up on
      if (s.deferred) {
        s.deferred = false;
        self->send(self, next_atom::value);
      }
    },
    [self](status_atom) { return self->state.status; },
    // Handlers run between batches: collect() makes a whole batch in one.
    [self](state_atom) { return take_state(self->state); },
  };
}

} // namespace

uint64_t resume_seed(uint64_t runner_seed, uint64_t batch) noexcept {
  return base::rng(runner_seed ^ (batch * 0x9e3779b97f4a7c15ull)).next();
}

result<bool> continue_envs(envs::vector_env& env, const env_runner_state& state,
                           uint64_t runner_seed) {
  if (state.env.with_state && env.can_save_state()) {
    if (auto ok = env.restore_state(state.env); !ok)
      return ok.err();
    return true;
  }
  env.reset(resume_seed(runner_seed, state.status.batches));
  return false;
}

status check_runner_state(const env_runner_state& state, const envs::vector_env& env,
                          const std::string& runner) {
  const size_t n = env.num_envs();
  auto fail = [&](const error& e) {
    return error{e.code, fmt::format("env runner '{}': cannot start from the state of "
                                     "runner '{}': {}",
                                     runner, state.runner, e.message)};
  };
  if (state.env_id != env.spec().id)
    return fail(make_error(errc::invalid_argument,
                           "env_id must be '{}' (this runner's environment), got '{}'",
                           env.spec().id, state.env_id));
  if (state.env.num_envs != n)
    return fail(make_error(errc::dimension_mismatch,
                           "num_envs must be {} (this runner's environments), got {}", n,
                           state.env.num_envs));
  // Without a saved environment state on either side, the episodes start
  // fresh and only the runner's own fields matter.
  if (state.env.with_state && env.can_save_state())
    if (auto ok = env.check_state(state.env); !ok)
      return fail(ok.err());
  if (!base::rng::valid_state(state.gen))
    return fail(make_error(errc::invalid_argument,
                           "gen (the policy's generator) must not be all zero, got 0, 0, "
                           "0, 0"));
  if (state.episode_return.size() != n || state.episode_length.size() != n)
    return fail(make_error(errc::dimension_mismatch,
                           "episode_return and episode_length must hold {} values (one "
                           "per environment), got {} and {}",
                           n, state.episode_return.size(), state.episode_length.size()));
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(state.episode_return[i]))
      return fail(make_error(errc::non_finite,
                             "environment {}: episode_return must be finite, got {}", i,
                             state.episode_return[i]));
  if (!state.discounted_return.empty() && state.discounted_return.size() != n)
    return fail(make_error(errc::dimension_mismatch,
                           "discounted_return must be empty or hold {} values (one per "
                           "environment), got {}",
                           n, state.discounted_return.size()));
  for (size_t i = 0; i < state.discounted_return.size(); ++i)
    if (!std::isfinite(state.discounted_return[i]))
      return fail(make_error(errc::non_finite,
                             "environment {}: discounted_return must be finite, got {}",
                             i, state.discounted_return[i]));
  return {};
}

caf::actor spawn_env_runner(caf::actor_system& sys, env_runner_options opts,
                            std::shared_ptr<envs::vector_env> env, policy_fn policy,
                            caf::actor consumer, caf::actor keeper,
                            std::shared_ptr<learners::stats_view> view,
                            std::shared_ptr<learners::stats_view> return_view) {
  return sys.spawn(env_runner, std::move(opts), std::move(env), std::move(policy),
                   std::move(consumer), std::move(keeper), std::move(view),
                   std::move(return_view));
}

} // namespace troupe::actors
