#include "runtime/cast.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "actors/env_runner.hpp"
#include "actors/learner.hpp"
#include "edge/runner_state_file.hpp"
#include "actors/stats_keeper.hpp"

namespace fs = std::filesystem;

namespace troupe::runtime {

result<learners::model_spec> model_spec_for(const config& cfg,
                                            const envs::env_spec& env) {
  learners::model_spec spec;
  spec.obs_dim = static_cast<int64_t>(env.observation_space.size());
  if (env.action_space.kind == envs::space_kind::discrete) {
    spec.action = learners::action_kind::discrete;
    spec.n = env.action_space.n;
  } else {
    spec.action = learners::action_kind::box;
    spec.act_dim = static_cast<int64_t>(env.action_space.size());
  }
  spec.hidden = cfg.get_int_list("model.hidden");
  auto act = learners::parse_activation(cfg.get_string("model.activation"));
  if (!act)
    return act.err();
  spec.activation = *act;
  auto bn = learners::parse_batch_norm(cfg.get_string("model.batch_norm"));
  if (!bn)
    return bn.err();
  spec.batch_norm = *bn;
  spec.batch_norm_eps = cfg.get_float("model.batch_norm_eps");
  spec.batch_norm_momentum = cfg.get_float("model.batch_norm_momentum");
  // Runners hand the learners observations already normalized: the training
  // model has no normalizer of its own; the checkpoint's model does.
  spec.obs_norm = false;
  spec.obs_norm_eps = cfg.get_float("model.obs_norm_eps");
  spec.obs_norm_clip = cfg.get_float("model.obs_norm_clip");
  if (auto ok = spec.validate(); !ok)
    return ok.err();
  return spec;
}

result<learners::algorithm_settings> algorithm_settings_for(const config& cfg) {
  learners::algorithm_settings out;
  out.name = cfg.get_string("algo.name");
  out.gamma = cfg.get_float("algo.gamma");
  if (auto info = learners::find_algorithm(out.name)) {
    const std::string section = "algo." + out.name + ".";
    auto read = info->read([&](const learners::hyperparameter& h) -> double {
      const std::string key = section + h.key;
      switch (h.type) {
      case learners::hyperparameter_type::boolean:
        return cfg.get_bool(key) ? 1.0 : 0.0;
      case learners::hyperparameter_type::integer:
        return static_cast<double>(cfg.get_int(key));
      case learners::hyperparameter_type::floating:
        break;
      }
      return cfg.get_float(key);
    });
    if (!read)
      return read.err();
    out.settings = std::move(*read);
  }
  return out;
}

status check_algorithm(const config& cfg, const learners::model_spec& spec) {
  const std::string where =
    cfg.source_path().empty() ? std::string{"config"} : cfg.source_path();
  auto settings = algorithm_settings_for(cfg);
  if (!settings)
    return make_error(errc::bad_config, "{}: algo: {}", where, settings.err().message);
  auto made = learners::make_algorithm(spec, *settings);
  if (!made)
    return make_error(errc::bad_config, "{}: algo: {}", where, made.err().message);
  // The smallest batch of the run: runner slot 0 (env.num_envs_spread >= 1).
  const auto rows =
    static_cast<size_t>(cfg.get_int("algo.num_steps") * cfg.get_int("env.num_envs"));
  if (auto ok = (*made)->check_batch_size(rows); !ok)
    return make_error(errc::bad_config,
                      "{}: {} (algo.num_steps = {} at {}, env.num_envs "
                      "= {} at {})",
                      where, ok.err().message, cfg.get_int("algo.num_steps"),
                      cfg.origin("algo.num_steps"), cfg.get_int("env.num_envs"),
                      cfg.origin("env.num_envs"));
  return ok_status();
}

double runner_slowdown(const config& cfg, uint64_t slot) {
  const auto slots = static_cast<uint64_t>(cfg.get_int("algo.num_learners") *
                                           cfg.get_int("algo.runners_per_learner"));
  const auto slow =
    std::min(slots, static_cast<uint64_t>(cfg.get_int("env.slow_runners")));
  return slot >= slots - slow && slot < slots ? cfg.get_float("env.slowdown") : 1.0;
}

unsigned learner_threads_for(const config& cfg, const learners::model_spec& spec,
                             learners::device_kind device, bool own_runners) {
  if (auto set = cfg.get_int("algo.learner_threads"); set > 0)
    return static_cast<unsigned>(set);
  // 0: the second thread only where it would idle otherwise. In a sync run
  // in one process the only learner's runners wait while it learns, so the
  // core they act on is free during every update.
  const bool free_core = own_runners && cfg.get_string("algo.mode") == "sync" &&
                         cfg.get_int("algo.num_learners") == 1 &&
                         cfg.get_string("cluster.listen").empty() &&
                         device == learners::device_kind::cpu &&
                         spec.batch_norm == learners::batch_norm_mode::none &&
                         std::thread::hardware_concurrency() >= 2;
  return free_core ? 2 : 1;
}

namespace {

// The keeper, the parameter server, the metrics actor and the streams.
void plan_shared_actors(actors::cast_plan& plan, const config& cfg,
                        const learners::model_spec& spec,
                        const learners::actor_critic& initial, const std::string& run_dir,
                        const resume_point& resume) {
  const bool sync = cfg.get_string("algo.mode") == "sync";
  plan.keeper.mode = cfg.get_string("stats.mode");
  plan.keeper.momentum = cfg.get_float("stats.momentum");
  plan.keeper.publish_every_merges =
    static_cast<uint64_t>(cfg.get_int("stats.publish_every_merges"));
  plan.keeper.freeze_after = static_cast<uint64_t>(cfg.get_int("stats.freeze_after"));
  plan.keeper.publish_interval_ms =
    static_cast<uint64_t>(cfg.get_int("stats.publish_interval_ms"));

  plan.store = std::make_shared<actors::policy_store>(
    initial, static_cast<size_t>(cfg.get_int("algo.max_staleness")) + 64);
  plan.server.sync = sync;
  plan.server.num_learners = static_cast<uint64_t>(cfg.get_int("algo.num_learners"));
  plan.server.max_staleness = static_cast<uint64_t>(cfg.get_int("algo.max_staleness"));
  plan.server.max_grad_norm = cfg.get_float("algo.max_grad_norm");
  plan.server.adam.lr = cfg.get_float("algo.learning_rate");
  plan.server.adam.eps = cfg.get_float("algo.adam_eps");
  plan.params.assign(initial.params(), initial.params() + initial.param_count());
  plan.buffers.assign(initial.buffers(), initial.buffers() + initial.buffer_count());
  if (!resume.checkpoint.empty()) {
    plan.server_state = resume.server;
    plan.keeper_state = (fs::path(resume.checkpoint) / "stats.bin").string();
  }

  plan.max_runner_restarts =
    static_cast<uint64_t>(cfg.get_int("run.max_runner_restarts"));
  plan.max_learner_restarts =
    static_cast<uint64_t>(cfg.get_int("run.max_learner_restarts"));
  plan.metrics.csv_path = (fs::path(run_dir) / "metrics.csv").string();
  plan.metrics.jsonl_path = (fs::path(run_dir) / "metrics.jsonl").string();
  // A coordinator of a run across processes: a row per host beside each row.
  if (!cfg.get_string("cluster.listen").empty())
    plan.metrics.hosts_csv_path = (fs::path(run_dir) / "hosts.csv").string();
  if (cfg.get_bool("run.tensorboard"))
    plan.metrics.tensorboard_dir = run_dir;
  plan.metrics.log_every_updates =
    static_cast<uint64_t>(cfg.get_int("run.log_every_updates"));
  plan.metrics.checkpoint_every_updates =
    static_cast<uint64_t>(cfg.get_int("run.checkpoint_every_updates"));
  plan.metrics.total_env_steps =
    static_cast<uint64_t>(cfg.get_int("algo.total_env_steps"));
  plan.metrics.start = resume.start;

  // Global batch norm: one keeper stream per layer, named by its prefix,
  // cumulative or ema (PyTorch's momentum m is the keeper's 1 - m). Ema with
  // a delta per minibatch moves too fast to learn with (docs/experiments.md).
  if (spec.batch_norm == learners::batch_norm_mode::global) {
    for (auto& layer : initial.batch_norm_layers()) {
      plan.streams.push_back(actors::stream_decl{
        layer.prefix, static_cast<uint64_t>(layer.width),
        cfg.get_string("model.batch_norm_stats"), 1.0 - spec.batch_norm_momentum});
      plan.batch_norm_streams.emplace_back(layer.prefix,
                                           static_cast<size_t>(layer.width));
    }
  }
  // The observation stream exists before any view subscribes to it (the
  // runners declare it too; declaring again is a no-op).
  if (cfg.get_bool("model.obs_norm")) {
    plan.streams.push_back(actors::stream_decl{"obs", static_cast<uint64_t>(spec.obs_dim),
                                               plan.keeper.mode, plan.keeper.momentum});
    plan.obs_stream = "obs";
    plan.obs_dim = static_cast<size_t>(spec.obs_dim);
  }
  // Reward normalization's discounted returns: always cumulative (the exact
  // variance of every return seen, as Gymnasium's RunningMeanStd).
  if (cfg.get_bool("model.reward_norm"))
    plan.streams.push_back(actors::stream_decl{"ret", 1, "cumulative", 0.99});
}

} // namespace

cast_build build_cast(caf::actor_system& sys, const config& cfg,
                      const learners::model_spec& spec, const envs::env_spec& env,
                      learners::device_kind device, const std::string& run_dir,
                      const resume_point& resume, const cast_options& options) {
  const std::string algo_name = cfg.get_string("algo.name");
  const bool sync = cfg.get_string("algo.mode") == "sync";
  const uint64_t num_learners = static_cast<uint64_t>(cfg.get_int("algo.num_learners"));
  const size_t runners_per_learner =
    static_cast<size_t>(cfg.get_int("algo.runners_per_learner"));
  const size_t num_envs = static_cast<size_t>(cfg.get_int("env.num_envs"));
  const size_t num_steps = static_cast<size_t>(cfg.get_int("algo.num_steps"));
  const uint64_t total = static_cast<uint64_t>(cfg.get_int("algo.total_env_steps"));
  const uint64_t seed = static_cast<uint64_t>(cfg.get_int("run.seed"));
  const bool obs_norm = cfg.get_bool("model.obs_norm");
  const uint64_t resume_salt = resume.seed_salt();
  const actors::metrics_counters& start = resume.start;

  cast_build out;
  out.spec = spec;
  out.env_id = env.id;
  out.algo = algo_name;
  out.obs_norm = obs_norm;
  auto& plan = out.plan;
  learners::actor_critic initial(spec, seed);
  plan_shared_actors(plan, cfg, spec, initial, run_dir, resume);
  const actors::log_sink log = options.log;
  plan.keeper.log = log;
  plan.server.log = log;
  plan.metrics.log = log;
  plan.metrics.progress_line = options.progress_line;
  plan.metrics.reward_terms = env.reward_terms;
  plan.metrics.env_counters = env.counters;

  // -- learners ---------------------------------------------------------------
  // Runner slot i (over all learners) has num_envs * spread^i environments.
  const double envs_spread = cfg.get_float("env.num_envs_spread");
  auto envs_of_slot = [num_envs, envs_spread](uint64_t slot) {
    const double n = std::round(static_cast<double>(num_envs) *
                                std::pow(envs_spread, static_cast<double>(slot)));
    return static_cast<size_t>(std::max(1.0, n));
  };
  std::vector<uint64_t> learner_round_steps(num_learners, 0);
  uint64_t all_round_steps = 0;
  for (uint64_t li = 0; li < num_learners; ++li) {
    for (size_t ri = 0; ri < runners_per_learner; ++ri)
      learner_round_steps[li] += num_steps * envs_of_slot(li * runners_per_learner + ri);
    all_round_steps += learner_round_steps[li];
  }
  auto shared_budget = std::make_shared<actors::step_budget>(total, start.env_steps);
  auto settings = algorithm_settings_for(cfg);
  // check_algorithm refused a config whose settings do not read.
  TROUPE_CHECK(settings.ok(), "{}",
               settings.ok() ? std::string{} : settings.err().message);
  const auto algorithm = std::move(*settings);
  for (uint64_t li = 0; li < num_learners; ++li) {
    actors::learner_plan lp;
    auto& lo = lp.options;
    lo.name = fmt::format("learner{}", li);
    lo.algorithm = algorithm;
    lo.spec = spec;
    lo.learning_rate = cfg.get_float("algo.learning_rate");
    lo.anneal_lr = cfg.get_bool("algo.anneal_lr");
    lo.num_runners = runners_per_learner;
    lo.steps_per_runner_batch = num_steps * num_envs;
    for (size_t ri = 0; ri < runners_per_learner; ++ri)
      lo.runner_batch_steps.push_back(num_steps *
                                      envs_of_slot(li * runners_per_learner + ri));
    lo.pipelined = !sync;
    // The only learner of a run in one process applies its gradients itself,
    // with the server's settings (bit for bit the same steps), and hands the
    // server one batch's steps at a time (sync or async: with one learner
    // that waits for every answer both apply each gradient as it comes); a
    // coordinator's workers may add learners, so a run across processes
    // keeps the round trips.
    lo.local_optimizer = num_learners == 1 && cfg.get_string("cluster.listen").empty();
    lo.adam = plan.server.adam;
    lo.max_grad_norm = plan.server.max_grad_norm;
    lo.seed = seed * 7919 + li + resume_salt;
    if (auto g = resume.learner_gens.find(lo.name); g != resume.learner_gens.end())
      lo.start_gen = g->second;
    lo.device = device;
    lo.compute_threads =
      learner_threads_for(cfg, spec, device, options.runner_factories.empty());
    lo.log = log;
    // sync: every learner takes part in every step, so each gets the same
    // number of batches (its share of the steps follows its batch sizes).
    const double share =
      static_cast<double>(learner_round_steps[li]) / static_cast<double>(all_round_steps);
    const uint64_t rounds = (total + all_round_steps - 1) / all_round_steps;
    lp.budget = sync ? std::make_shared<actors::step_budget>(
                         rounds * learner_round_steps[li],
                         static_cast<uint64_t>(
                           std::llround(share * static_cast<double>(start.env_steps))))
                     : shared_budget;
    plan.learners.push_back(std::move(lp));
  }

  // -- the runner slots ---------------------------------------------------------
  const std::string env_id = env.id;
  const size_t env_threads = static_cast<size_t>(cfg.get_int("env.threads"));
  // The checkpoint's model (and so troupe eval) normalizes with the same epsilon.
  const double eps = cfg.get_float("model.obs_norm_eps");
  const double clip = cfg.get_float("model.obs_norm_clip");
  const bool box = spec.action == learners::action_kind::box;
  const double obs_scale = cfg.get_float("env.obs_scale");
  const double obs_spread = cfg.get_float("env.obs_scale_spread");
  const bool runner_obs_norm = cfg.get_string("model.obs_norm_scope") == "runner";
  const bool reward_norm = cfg.get_bool("model.reward_norm");
  const bool runner_reward_norm = cfg.get_string("model.reward_norm_scope") == "runner";
  std::vector<double> slowdowns(num_learners * runners_per_learner); // an uneven fleet
  for (uint64_t slot = 0; slot < slowdowns.size(); ++slot)
    slowdowns[slot] = runner_slowdown(cfg, slot);
  const double reward_gamma = cfg.get_float("model.reward_norm_gamma");
  const double reward_eps = cfg.get_float("model.reward_norm_eps");
  const double reward_clip = cfg.get_float("model.reward_norm_clip");
  const bool norm_diagnostics = cfg.get_bool("run.norm_diagnostics");
  const bool norm_every_step = cfg.get_string("model.norm_update") == "step";
  plan.make_runner = [&sys, store = plan.store, env_id, envs_of_slot, env_threads,
                      num_steps, seed, runners_per_learner, obs_norm, eps, clip, box,
                      resume_salt, obs_scale, obs_spread, runner_obs_norm, reward_norm,
                      runner_reward_norm, reward_gamma, reward_eps, reward_clip,
                      norm_diagnostics, norm_every_step, slowdowns,
                      saved_runners = resume.runners, spec,
                      factories = options.runner_factories, log,
                      obs_dim = spec.obs_dim](const actors::runner_request& req) {
    const uint64_t slot = req.learner * runners_per_learner + req.index;
    const size_t n = envs_of_slot(slot);
    const uint64_t runner_seed =
      seed + slot * n + req.restarts * 1000003ull + resume_salt;
    // Resume: a runner's first incarnation continues its saved state when it
    // fits (the same env id and number of environments).
    auto saved = saved_runners->find(req.name);
    const bool continues = req.restarts == 0 && saved != saved_runners->end();
    if (req.learner < factories.size() && factories[req.learner]) {
      runner_slot rs;
      rs.request = req;
      rs.slot = slot;
      rs.envs = n;
      rs.steps_per_batch = num_steps;
      rs.seed = runner_seed;
      rs.store = store;
      rs.spec = spec;
      rs.obs_norm = obs_norm;
      rs.obs_epsilon = eps;
      rs.obs_clip = clip;
      rs.log = log;
      if (continues)
        rs.saved = saved->second;
      if (reward_norm)
        actors::write_log(log, actors::log_level::warning,
                          fmt::format("troupe: runner slot '{}' is fed by the caller's "
                                      "factory: model.reward_norm does not apply to its "
                                      "rewards",
                                      req.name));
      if (norm_every_step)
        actors::write_log(
          log, actors::log_level::warning,
          fmt::format("troupe: runner slot '{}' is fed by the caller's "
                      "factory: model.norm_update = \"step\" does not "
                      "apply to it (it normalizes with the view as it is)",
                      req.name));
      return factories[req.learner](sys, rs);
    }
    auto env = envs::make_vector_env(env_id, n, env_threads);
    if (!env) {
      actors::write_log(
        log, actors::log_level::error,
        fmt::format("troupe: runner '{}': {}", req.name, env.err().message));
      return caf::actor{};
    }
    std::shared_ptr<envs::vector_env> shared(std::move(*env));
    if (box)
      shared->set_clip_box_actions(true);
    actors::env_runner_options ro;
    ro.name = req.name;
    ro.guest = req.guest;
    ro.seed = runner_seed;
    ro.steps_per_batch = num_steps;
    ro.obs_epsilon = eps;
    ro.obs_clip = clip;
    ro.obs_scale = obs_scale * std::pow(obs_spread, static_cast<double>(slot));
    ro.local_obs_stats = obs_norm && runner_obs_norm;
    ro.clip_box_actions = box;
    ro.reward_norm = reward_norm;
    ro.reward_gamma = reward_gamma;
    ro.reward_epsilon = reward_eps;
    ro.reward_clip = reward_clip;
    ro.local_return_stats = reward_norm && runner_reward_norm;
    ro.slowdown = slot < slowdowns.size() ? slowdowns[slot] : 1.0;
    ro.norm_diagnostics = norm_diagnostics;
    ro.norm_every_step = norm_every_step;
    if (norm_diagnostics)
      ro.divergence = actors::make_store_divergence(store);
    ro.log = log;
    if (continues) {
      if (auto fits = actors::check_runner_state(saved->second, *shared, req.name); fits)
        ro.start_state = saved->second;
      else
        actors::write_log(log, actors::log_level::warning,
                          "troupe: not continuing the saved runner state: " +
                            fits.err().message);
    }
    // The view holds the keeper's current snapshot before the runner's first
    // step: a resumed or restarted runner acts on normalized observations.
    std::shared_ptr<learners::stats_view> view;
    if (obs_norm) {
      auto v =
        actors::subscribe_view(sys, req.keeper, "obs", static_cast<size_t>(obs_dim));
      if (!v) {
        actors::write_log(
          log, actors::log_level::error,
          fmt::format("troupe: runner '{}': {}", req.name, v.err().message));
        return caf::actor{};
      }
      view = std::move(*v);
    }
    std::shared_ptr<learners::stats_view> return_view;
    if (reward_norm) {
      auto v = actors::subscribe_view(sys, req.keeper, ro.return_stream, 1);
      if (!v) {
        actors::write_log(
          log, actors::log_level::error,
          fmt::format("troupe: runner '{}': {}", req.name, v.err().message));
        return caf::actor{};
      }
      return_view = std::move(*v);
    }
    auto policy = actors::make_store_policy(store, num_steps);
    return actors::spawn_env_runner(sys, ro, shared, policy, req.consumer,
                                    req.deltas ? req.deltas : req.keeper, view,
                                    return_view);
  };
  return out;
}

} // namespace troupe::runtime
