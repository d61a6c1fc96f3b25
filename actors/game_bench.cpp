#include "actors/game_bench.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include <caf/all.hpp>

#include "actors/game_agent.hpp"
#include "actors/learner.hpp"
#include "actors/messages.hpp"
#include "actors/parameter_server.hpp"
#include "actors/policy_store.hpp"
#include "actors/stats_keeper.hpp"
#include "envs/registry.hpp"

namespace troupe::actors {

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

} // namespace

result<embed_bench_result> bench_embed(const embed_bench_options& o) {
  if (o.slots == 0 || o.steps_per_segment == 0)
    return make_error(
      errc::invalid_argument,
      "bench_embed: slots and steps_per_segment must be >= 1, got {} and {}", o.slots,
      o.steps_per_segment);
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
    auto feeder = spawn_game_feeder(sys, fo, *agent, learner, keeper);
    caf::anon_send(learner, runner_atom::value, uint64_t{0}, feeder);
    cast = {feeder, learner, server, sink, keeper};
  }

  std::vector<std::array<float, 4>> obs(o.slots);
  for (size_t s = 0; s < o.slots; ++s)
    games[s]->reset(o.seed + s, obs[s].data());
  std::vector<double> latency_us;
  latency_us.reserve(o.latency_samples);
  embed_bench_result out;
  auto& a = **agent;
  const auto start = clock_type::now();
  status failed = ok_status();
  while (train ? !counts->ended.load() : out.game_env_steps < o.untrained_act_calls) {
    for (size_t s = 0; s < o.slots && failed.ok(); ++s) {
      float action = 0;
      const auto t0 = clock_type::now();
      failed = a.act(s, obs[s].data(), &action);
      const auto t1 = clock_type::now();
      if (!failed.ok())
        break;
      if (latency_us.size() < o.latency_samples)
        latency_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      auto r = games[s]->step(&action, obs[s].data());
      if (!r) {
        failed = r.err();
        break;
      }
      const bool ends = r->terminated || r->truncated;
      failed = a.report(s, r->reward, r->terminated, r->truncated,
                        ends ? obs[s].data() : nullptr);
      if (ends)
        games[s]->reset(obs[s].data());
      ++out.game_env_steps;
    }
    if (!failed.ok())
      break;
  }
  out.seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  a.close();
  for (auto& actor : cast)
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
  if (!failed.ok())
    return failed.err();
  const auto c = a.counters();
  out.act_samples = latency_us.size();
  out.act_max_us =
    latency_us.empty() ? 0 : *std::max_element(latency_us.begin(), latency_us.end());
  out.act_p50_us = percentile(latency_us, 0.50);
  out.act_p99_us = percentile(latency_us, 0.99);
  out.learned_env_steps = counts->env_steps.load();
  const double secs = std::max(out.seconds, 1e-9);
  out.game_env_steps_per_s = static_cast<double>(out.game_env_steps) / secs;
  out.learned_env_steps_per_s = static_cast<double>(out.learned_env_steps) / secs;
  out.dropped = c.dropped;
  out.episodes = c.episodes;
  out.return_mean_100 = c.return_mean_100;
  return out;
}

} // namespace troupe::actors
