#include "runtime/cli/game_bench.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "actors/learner.hpp"
#include "actors/messages.hpp"
#include "actors/parameter_server.hpp"
#include "actors/policy_store.hpp"
#include "actors/stats_keeper.hpp"
#include "edge/game_agent.hpp"
#include "envs/registry.hpp"
#include "base/rng.hpp"

namespace troupe::runtime {

using namespace actors;
using edge::game_agent;
using edge::game_agent_options;

namespace {

using clock_type = std::chrono::steady_clock;

struct learned {
  std::atomic<uint64_t> env_steps{0};
  std::atomic<bool> ended{false};
};

caf::behavior learned_counter(caf::event_based_actor*, std::shared_ptr<learned> out) {
  return {
    [out](learner_report& r) {
      if (!r.skipped)
        out->env_steps.fetch_add(r.env_steps);
    },
    [out](learner_state&) { out->ended.store(true); },
  };
}

double percentile(std::vector<double>& xs, double q) {
  if (xs.empty())
    return 0;
  const size_t k =
    std::min(xs.size() - 1, static_cast<size_t>(q * (xs.size() - 1) + 0.5));
  std::nth_element(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(k), xs.end());
  return xs[k];
}

latency_summary summarize(std::vector<double>& us) {
  latency_summary out;
  out.samples = us.size();
  if (us.empty())
    return out;
  out.max_us = *std::max_element(us.begin(), us.end());
  out.p50_us = percentile(us, 0.50);
  out.p99_us = percentile(us, 0.99);
  return out;
}

// The control: a network of the benchmark's size written as plain loops (no
// troupe code, no Eigen, the build's default instruction set), as a game's
// own small network would be.
class plain_network {
public:
  plain_network(size_t in, const std::vector<int64_t>& hidden, size_t out,
                uint64_t seed) {
    base::rng gen(seed);
    size_t width = in;
    auto add = [&](size_t next) {
      layer l{width, next, std::vector<float>(width * next), std::vector<float>(next)};
      const double scale = 1.0 / std::sqrt(static_cast<double>(width));
      for (auto& w : l.weights)
        w = static_cast<float>((2 * gen.unit() - 1) * scale);
      for (auto& b : l.bias)
        b = static_cast<float>(0.1 * gen.unit());
      layers_.push_back(std::move(l));
      width = next;
    };
    for (auto h : hidden)
      add(static_cast<size_t>(h));
    add(out);
    for (auto& l : layers_)
      scratch_.emplace_back(l.out);
  }

  // Forward pass of one observation; returns the first output.
  float forward(const float* x) {
    for (size_t k = 0; k < layers_.size(); ++k) {
      const auto& l = layers_[k];
      float* y = scratch_[k].data();
      for (size_t j = 0; j < l.out; ++j) {
        float sum = l.bias[j];
        for (size_t i = 0; i < l.in; ++i)
          sum += l.weights[j * l.in + i] * x[i];
        y[j] = k + 1 < layers_.size() ? std::tanh(sum) : sum;
      }
      x = y;
    }
    return x[0];
  }

private:
  struct layer {
    size_t in, out;
    std::vector<float> weights; // [out x in]
    std::vector<float> bias;
  };
  std::vector<layer> layers_;
  std::vector<std::vector<float>> scratch_;
};

} // namespace

result<embed_bench_result> run_embed_bench(const embed_bench_options& o) {
  if (o.slots == 0 || o.steps_per_segment == 0)
    return make_error(
      errc::invalid_argument,
      "bench_embed: slots and steps_per_segment must be >= 1, got {} and {}", o.slots,
      o.steps_per_segment);
  if (!(o.frame_hz >= 0 && o.frame_hz <= 100000))
    return make_error(errc::invalid_argument,
                      "bench_embed: frame_hz must be in [0, 100000], got {}", o.frame_hz);
  std::vector<std::unique_ptr<envs::env>> games;
  for (size_t s = 0; s < o.slots; ++s) {
    auto made = envs::make_env("CartPole-v1");
    if (!made)
      return made.err();
    games.push_back(std::move(*made));
  }
  learners::model_spec spec;
  spec.obs_dim = 4;
  spec.n = 2;
  spec.hidden = {64, 64};
  learners::actor_critic model(spec, o.seed);
  auto store = std::make_shared<policy_store>(model, 8);

  caf::actor_system_config cfg;
  register_messages(cfg);
  cfg.set("scheduler.max-threads", 1); // the game loop has a core of its own
  caf::actor_system sys(cfg);
  const bool train = o.train_env_steps > 0;
  auto counts = std::make_shared<learned>();
  game_agent_options ao;
  ao.env_id = "CartPole-v1";
  ao.slots = o.slots;
  ao.steps_per_segment = o.steps_per_segment;
  ao.queue_capacity = o.queue_capacity;
  ao.seed = o.seed;
  auto agent = game_agent::create(ao, store);
  if (!agent)
    return agent.err();
  std::vector<caf::actor> cast;
  if (train) {
    auto quiet = [](const std::string&) {};
    stats_keeper_options ko;
    ko.log = quiet;
    auto keeper = spawn_stats_keeper(sys, ko);
    parameter_server_options ps;
    ps.sync = true;
    ps.log = quiet;
    auto server = spawn_parameter_server(
      sys, ps, std::vector<float>(model.params(), model.params() + model.param_count()),
      {}, store);
    auto sink = sys.spawn(learned_counter, counts);
    learner_options lo;
    lo.name = "learner0";
    lo.spec = spec;
    lo.steps_per_runner_batch = o.slots * o.steps_per_segment;
    lo.seed = o.seed;
    lo.report_to = sink;
    lo.log = quiet;
    auto learner = spawn_learner(sys, lo, server, sink, store,
                                 std::make_shared<step_budget>(o.train_env_steps));
    game_feeder_options fo;
    fo.name = "learner0.runner0";
    fo.num_envs = o.slots;
    fo.log = quiet;
    auto feeder = spawn_game_feeder(sys, fo, (*agent)->queue(), learner, keeper);
    caf::anon_send(learner, runner_atom::value, uint64_t{0}, feeder);
    cast = {feeder, learner, server, sink, keeper};
  }

  std::vector<std::array<float, 4>> obs(o.slots);
  static_assert(sizeof(std::array<float, 4>) == 4 * sizeof(float),
                "act_batch reads the observations as one [slots x 4] block");
  for (size_t s = 0; s < o.slots; ++s)
    games[s]->reset(o.seed + s, obs[s].data());
  std::vector<double> latency_us;
  latency_us.reserve(o.latency_samples);
  embed_bench_result out;
  auto& a = **agent;
  // Times one act() or act_batch() call (into `into` when given).
  auto timed = [&](std::vector<double>* into, auto&& call) -> status {
    const auto t0 = clock_type::now();
    auto acted = call();
    const auto t1 = clock_type::now();
    const double us = std::chrono::duration<double, std::micro>(t1 - t0).count();
    if (acted.ok() && latency_us.size() < o.latency_samples)
      latency_us.push_back(us);
    if (acted.ok() && into)
      into->push_back(us);
    return acted;
  };
  // Steps slot s's game with `action` and reports the outcome.
  auto step = [&](size_t s, float action) -> status {
    auto r = games[s]->step(&action, obs[s].data());
    if (!r)
      return r.err();
    const bool ends = r->terminated || r->truncated;
    auto reported =
      a.report(s, r->reward, r->terminated, r->truncated, ends ? obs[s].data() : nullptr);
    if (ends)
      games[s]->reset(obs[s].data());
    ++out.game_env_steps;
    return reported;
  };
  // One env step of slot s: act (timed, into `into` when given), step, report.
  auto play = [&](size_t s, std::vector<double>* into) -> status {
    float action = 0;
    auto acted = timed(into, [&] { return a.act(s, obs[s].data(), &action); });
    return acted.ok() ? step(s, action) : acted;
  };
  // One env step of every slot: one act_batch() call (timed), then steps.
  std::vector<float> actions(o.slots);
  auto play_all = [&](std::vector<double>* into) -> status {
    auto acted =
      timed(into, [&] { return a.act_batch(0, o.slots, obs[0].data(), actions.data()); });
    for (size_t s = 0; s < o.slots && acted.ok(); ++s)
      acted = step(s, actions[s]);
    return acted;
  };
  const auto start = clock_type::now();
  status failed = ok_status();
  if (o.frame_hz <= 0) {
    while (failed.ok() &&
           (train ? !counts->ended.load() : out.game_env_steps < o.untrained_act_calls))
      for (size_t s = 0; s < o.slots && failed.ok(); ++s)
        failed = play(s, nullptr);
  } else {
    plain_network control(spec.obs_dim, spec.hidden, spec.n, o.seed);
    volatile float control_sink = 0; // keeps the control's work from being elided
    auto time_control = [&](std::vector<double>& into) {
      const auto t0 = clock_type::now();
      control_sink = control.forward(obs[0].data());
      into.push_back(
        std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
    };
    std::vector<double> first, rest, control_first, control_warm;
    const auto period = std::chrono::duration_cast<clock_type::duration>(
      std::chrono::duration<double>(1.0 / o.frame_hz));
    auto deadline = clock_type::now();
    for (uint64_t f = 0; f < o.frames && failed.ok(); ++f) {
      deadline += period;
      if (o.spin)
        while (clock_type::now() < deadline) {
        }
      else
        std::this_thread::sleep_until(deadline);
      const bool acts_lead = f % 2 == 1;
      if (!acts_lead)
        time_control(control_first);
      if (o.batch)
        failed = play_all(acts_lead ? &first : &rest);
      else
        for (size_t s = 0; s < o.slots && failed.ok(); ++s)
          failed = play(s, s == 0 && acts_lead ? &first : &rest);
      if (acts_lead)
        time_control(control_warm);
      ++out.frames;
      if (clock_type::now() > deadline + period) {
        ++out.missed_frames;
        deadline = clock_type::now(); // start again from now, as a game would
      }
    }
    out.first_act = summarize(first);
    out.rest_act = summarize(rest);
    out.control_first = summarize(control_first);
    out.control_warm = summarize(control_warm);
  }
  out.seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  a.close();
  for (auto& actor : cast)
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  if (!failed.ok())
    return failed.err();
  const auto c = a.counters();
  const auto all = summarize(latency_us);
  out.act_samples = all.samples;
  out.act_max_us = all.max_us;
  out.act_p50_us = all.p50_us;
  out.act_p99_us = all.p99_us;
  out.learned_env_steps = counts->env_steps.load();
  const double secs = std::max(out.seconds, 1e-9);
  out.game_env_steps_per_s = static_cast<double>(out.game_env_steps) / secs;
  out.learned_env_steps_per_s = static_cast<double>(out.learned_env_steps) / secs;
  out.dropped = c.dropped;
  out.episodes = c.episodes;
  out.return_mean_100 = c.return_mean_100;
  return out;
}

} // namespace troupe::runtime
