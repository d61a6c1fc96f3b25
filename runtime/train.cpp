#include "runtime/train.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <unistd.h>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/env_runner.hpp"
#include "actors/learner.hpp"
#include "actors/messages.hpp"
#include "actors/metrics.hpp"
#include "actors/parameter_server.hpp"
#include "actors/policy_store.hpp"
#include "actors/runner_state_file.hpp"
#include "actors/stats_keeper.hpp"
#include "actors/stats_streams.hpp"
#include "actors/supervisor.hpp"
#include "envs/registry.hpp"
#include "learners/backend.hpp"
#include "learners/checkpoint.hpp"
#include "learners/safetensors.hpp"
#if __has_include("runtime/plot.hpp")
#include "runtime/plot.hpp"
#define TROUPE_HAVE_PLOT 1
#endif

namespace fs = std::filesystem;

namespace troupe::runtime {

namespace {

std::atomic<int> stop_signal{0};

extern "C" void on_stop_signal(int sig) {
  stop_signal.store(sig);
}

// -- the model and the cast ---------------------------------------------------

result<learners::model_spec> spec_for(const config& cfg, const envs::env_spec& env) {
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

std::string timestamp() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// -- checkpoints --------------------------------------------------------------

struct cast {
  caf::actor keeper, server, metrics, supervisor;
  learners::model_spec spec;
  std::string env_id, algo;
  bool obs_norm = false;
};

template <class T, class... Ts>
result<T> ask(caf::scoped_actor& self, const caf::actor& dest, Ts&&... xs) {
  result<T> out = make_error(errc::unavailable, "no answer");
  self->request(dest, caf::infinite, std::forward<Ts>(xs)...)
    .receive([&](T& x) { out = std::move(x); },
             [&](caf::error& e) {
               out = make_error(errc::unavailable, "{}",
                                actors::error_message(self->system(), e));
             });
  return out;
}

status write_text(const std::string& path, const std::string& text) {
  return learners::write_file_atomically(path, text.data(), text.size());
}

// Writes checkpoints/<updates>/ through <updates>.tmp, renamed when complete;
// on any failure the .tmp folder is removed, so nothing half written stays.
// `snap`: the cast's random states (runners, learners) to save with it.
status write_checkpoint(caf::scoped_actor& self, const cast& c,
                        const std::string& run_dir, uint64_t run_seed,
                        const actors::cast_snapshot& snap) {
  auto counters =
    ask<actors::metrics_counters>(self, c.metrics, actors::state_atom::value);
  if (!counters)
    return counters.err();
  auto ps =
    ask<actors::parameter_server_state>(self, c.server, actors::state_atom::value);
  if (!ps)
    return ps.err();
  // The server counts learned batches together with the weights they changed;
  // the metrics actor's counters run a little ahead or behind in async runs.
  counters->env_steps = ps->counters.env_steps;
  counters->updates = ps->counters.batches;
  const fs::path final_dir =
    fs::path(run_dir) / "checkpoints" / fmt::format("{:010d}", counters->updates);
  const fs::path tmp = final_dir.string() + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec)
    return make_error(errc::io_error, "cannot create {}: {}", tmp.string(), ec.message());
  struct remove_unless_renamed {
    const fs::path& dir;
    bool renamed = false;
    ~remove_unless_renamed() {
      std::error_code ignored;
      if (!renamed)
        fs::remove_all(dir, ignored);
    }
  } tmp_guard{tmp};
  // The policy, with the normalizer's statistics when observations are normalized.
  learners::model_spec ckpt_spec = c.spec;
  ckpt_spec.obs_norm = c.obs_norm;
  learners::actor_critic model(ckpt_spec, 0);
  std::copy(ps->params.begin(), ps->params.end(), model.params());
  std::copy(ps->buffers.begin(), ps->buffers.end(), model.buffers());
  learners::stats_snapshot obs_stats;
  if (c.obs_norm) {
    auto snap = ask<learners::stats_snapshot>(
      self, c.keeper, actors::snapshot_atom::value, std::string{"obs"});
    if (snap)
      obs_stats = std::move(*snap);
    if (obs_stats.mean.size() != static_cast<size_t>(c.spec.obs_dim)) {
      obs_stats.mean.assign(c.spec.obs_dim, 0.0);
      obs_stats.var.assign(c.spec.obs_dim, 1.0);
    }
  }
  std::map<std::string, std::string> extra = {
    {"env_id", c.env_id},
    {"algo", c.algo},
    {"updates", std::to_string(counters->updates)},
    {"env_steps", std::to_string(counters->env_steps)}};
  if (auto ok = learners::save_checkpoint((tmp / "policy.safetensors").string(), model,
                                          c.obs_norm ? &obs_stats : nullptr, extra);
      !ok)
    return ok;
  // The optimizer: the parameter server's whole state.
  learners::st_file opt;
  opt.metadata["format"] = "troupe.optimizer";
  opt.metadata["format_version"] = "1";
  const auto n = static_cast<int64_t>(ps->params.size());
  opt.tensors.push_back(learners::st_tensor::from_f32("params", {n}, ps->params.data()));
  opt.tensors.push_back(learners::st_tensor::from_f32("adam_m", {n}, ps->adam_m.data()));
  opt.tensors.push_back(learners::st_tensor::from_f32("adam_v", {n}, ps->adam_v.data()));
  if (!ps->buffers.empty())
    opt.tensors.push_back(learners::st_tensor::from_f32(
      "buffers", {static_cast<int64_t>(ps->buffers.size())}, ps->buffers.data()));
  const int64_t ints[] = {static_cast<int64_t>(ps->version),
                          ps->adam_steps,
                          static_cast<int64_t>(ps->counters.received),
                          static_cast<int64_t>(ps->counters.applied),
                          static_cast<int64_t>(ps->counters.dropped),
                          static_cast<int64_t>(ps->counters.max_staleness_seen),
                          static_cast<int64_t>(ps->counters.batches),
                          static_cast<int64_t>(ps->counters.env_steps)};
  opt.tensors.push_back(learners::st_tensor::from_i64("counters", {8}, ints));
  if (auto ok =
        learners::write_safetensors((tmp / "optimizer.safetensors").string(), opt);
      !ok)
    return ok;
  // The statistics keeper.
  auto saved = ask<caf::ok_atom>(self, c.keeper, actors::save_atom::value,
                                 (tmp / "stats.bin").string());
  if (!saved)
    return saved.err();
  // Every runner's state (environments, generators, episodes under way).
  if (auto ok =
        actors::save_runner_states((tmp / "runners.safetensors").string(), snap.runners);
      !ok)
    return ok;
  // Counters, the run seed and the learners' generators.
  std::ostringstream text;
  text << "env_steps " << counters->env_steps << "\nupdates " << counters->updates
       << "\nepisodes " << counters->episodes << "\nwall_time_s "
       << fmt::format("{:.17g}", counters->wall_time_s) << "\nrun_seed " << run_seed
       << "\nreturns";
  for (double r : counters->recent_returns)
    text << ' ' << fmt::format("{:.17g}", r);
  text << "\nlengths";
  for (auto l : counters->recent_lengths)
    text << ' ' << l;
  text << '\n';
  for (auto& l : snap.learners)
    text << "learner_gen " << l.learner << ' ' << l.gen[0] << ' ' << l.gen[1] << ' '
         << l.gen[2] << ' ' << l.gen[3] << '\n';
  if (auto ok = write_text((tmp / "counters.txt").string(), text.str()); !ok)
    return ok;
  // Last, the manifest: what a resume checks before it trusts the folder.
  if (auto ok = learners::write_checkpoint_manifest(
        tmp.string(), {"policy.safetensors", "optimizer.safetensors", "stats.bin",
                       "runners.safetensors", "counters.txt"});
      !ok)
    return ok;
  fs::remove_all(final_dir, ec);
  fs::rename(tmp, final_dir, ec);
  if (ec)
    return make_error(errc::io_error, "cannot rename {} to {}: {}", tmp.string(),
                      final_dir.string(), ec.message());
  tmp_guard.renamed = true;
  return {};
}

// What counters.txt holds.
struct saved_counters {
  actors::metrics_counters counters;
  std::map<std::string, std::array<uint64_t, 4>> learner_gens; ///< by learner name
};

result<saved_counters> read_counters(const std::string& path) {
  std::ifstream f(path);
  if (!f)
    return make_error(errc::io_error, "cannot read {}", path);
  saved_counters out;
  auto& c = out.counters;
  std::string line;
  for (size_t number = 1; std::getline(f, line); ++number) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "learner_gen") {
      std::string name;
      std::array<uint64_t, 4> words{};
      if (!(in >> name >> words[0] >> words[1] >> words[2] >> words[3]))
        return make_error(errc::bad_input,
                          "{}:{}: learner_gen takes a name and four integers", path,
                          number);
      out.learner_gens[name] = words;
    } else if (key == "env_steps")
      in >> c.env_steps;
    else if (key == "updates")
      in >> c.updates;
    else if (key == "episodes")
      in >> c.episodes;
    else if (key == "wall_time_s")
      in >> c.wall_time_s;
    else if (key == "returns")
      for (double x; in >> x;)
        c.recent_returns.push_back(x);
    else if (key == "lengths")
      for (uint64_t x; in >> x;)
        c.recent_lengths.push_back(x);
  }
  return out;
}

result<actors::parameter_server_state> read_optimizer(const std::string& path) {
  auto file = learners::read_safetensors(path);
  if (!file)
    return file.err();
  actors::parameter_server_state st;
  auto get = [&](const char* name) -> const learners::st_tensor* {
    return file->find(name);
  };
  if (!get("params") || !get("adam_m") || !get("adam_v") || !get("counters"))
    return make_error(errc::bad_input, "{}: missing tensors", path);
  st.params = get("params")->to_f32();
  st.adam_m = get("adam_m")->to_f32();
  st.adam_v = get("adam_v")->to_f32();
  if (get("buffers"))
    st.buffers = get("buffers")->to_f32();
  auto ints = get("counters")->to_i64();
  if (ints.size() != 6 && ints.size() != 8)
    return make_error(errc::bad_input, "{}: counters has {} values, expected 8", path,
                      ints.size());
  st.version = static_cast<uint64_t>(ints[0]);
  st.adam_steps = ints[1];
  st.counters.received = static_cast<uint64_t>(ints[2]);
  st.counters.applied = static_cast<uint64_t>(ints[3]);
  st.counters.dropped = static_cast<uint64_t>(ints[4]);
  st.counters.max_staleness_seen = static_cast<uint64_t>(ints[5]);
  if (ints.size() == 8) {
    st.counters.batches = static_cast<uint64_t>(ints[6]);
    st.counters.env_steps = static_cast<uint64_t>(ints[7]);
  }
  st.counters.version = st.version;
  return st;
}

// A resumed run forgets the rows written after its checkpoint (the killed
// run's last moments), so that metrics.csv and metrics.jsonl stay monotonic.
void keep_rows_up_to(const std::string& path, uint64_t updates, bool csv) {
  std::ifstream in(path);
  if (!in)
    return;
  std::string line, kept;
  bool header = csv;
  while (std::getline(in, line)) {
    if (in.eof())
      break; // an unterminated last line: a row being written when killed
    uint64_t row_updates = 0;
    if (header) {
      header = false;
    } else if (csv) {
      std::istringstream cells(line);
      std::string cell;
      for (int i = 0; i < 3 && std::getline(cells, cell, ','); ++i) {
      }
      row_updates = std::strtoull(cell.c_str(), nullptr, 10);
    } else {
      // A line that is not a JSON object with a whole "updates" count is
      // dropped, as a row from after the checkpoint would be.
      auto row = nlohmann::json::parse(line, nullptr, false);
      if (!row.is_object() || !row.contains("updates") ||
          !row["updates"].is_number_unsigned())
        continue;
      row_updates = row["updates"].get<uint64_t>();
    }
    if (row_updates <= updates)
      kept += line + "\n";
  }
  in.close();
  if (kept.empty()) {
    std::error_code ec;
    fs::remove(path, ec); // no header survived: the metrics actor writes a new one
    return;
  }
  (void)learners::write_file_atomically(path, kept.data(), kept.size());
}

// Removes all but the `keep` newest checkpoints (keep 0: none removed).
void prune_checkpoints(const std::string& run_dir, size_t keep) {
  auto all = learners::checkpoint_folders(run_dir);
  if (keep == 0 || all.size() <= keep)
    return;
  std::error_code ec;
  for (size_t i = 0; i + keep < all.size(); ++i)
    fs::remove_all(all[i], ec);
}

} // namespace

result<training_result> run_training(const config& cfg, const std::string& resume_dir) {
  auto env_spec = envs::find_spec(cfg.get_string("env.id"));
  if (!env_spec)
    return env_spec.err();
  auto spec = spec_for(cfg, **env_spec);
  if (!spec)
    return spec.err();
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

  auto device = learners::choose_device(cfg.get_string("run.device"));
  if (!device)
    return device.err();

  // -- the run folder ---------------------------------------------------------
  std::string run_dir = resume_dir;
  actors::metrics_counters start;
  std::string checkpoint;
  std::map<std::string, std::array<uint64_t, 4>> learner_gens;
  auto saved_runners =
    std::make_shared<std::map<std::string, actors::env_runner_state>>();
  std::optional<actors::parameter_server_state> resumed_server;
  if (!resume_dir.empty()) {
    // Everything is read and checked before anything in the folder changes.
    // A checkpoint that does not read back whole (a file cut short, missing
    // or changed since it was written) is reported, and the one before it is
    // tried.
    auto load = [&](const std::string& folder) -> status {
      start = {};
      learner_gens.clear();
      saved_runners->clear();
      resumed_server.reset();
      auto c = read_counters((fs::path(folder) / "counters.txt").string());
      if (!c)
        return c.err();
      start = std::move(c->counters);
      learner_gens = std::move(c->learner_gens);
      // Checkpoints written before runner states were saved have no file.
      const auto runners_file = fs::path(folder) / "runners.safetensors";
      if (fs::exists(runners_file)) {
        auto states = actors::load_runner_states(runners_file.string());
        if (!states)
          return states.err();
        for (auto& st : *states)
          saved_runners->emplace(st.runner, std::move(st));
      }
      auto server = read_optimizer((fs::path(folder) / "optimizer.safetensors").string());
      if (!server)
        return server.err();
      resumed_server = std::move(*server);
      actors::stats_streams stats;
      if (auto ok = stats.load((fs::path(folder) / "stats.bin").string()); !ok)
        return ok.err();
      return {};
    };
    auto found = learners::newest_good_checkpoint(
      resume_dir, load, [](const std::string& why) {
        std::fprintf(stderr, "troupe: %s\n", why.c_str());
      });
    if (!found && found.err().code != errc::not_found)
      return make_error(found.err().code, "cannot resume: {}", found.err().message);
    if (!found) {
      // Killed before its first checkpoint was complete: nothing was saved,
      // so the run starts over in its own folder.
      std::fprintf(stderr,
                   "troupe: %s has no complete checkpoint; starting the run over\n",
                   resume_dir.c_str());
      std::error_code ec;
      fs::create_directories(fs::path(run_dir) / "checkpoints", ec);
      if (ec)
        return make_error(errc::io_error, "cannot create {}: {}",
                          (fs::path(run_dir) / "checkpoints").string(), ec.message());
    } else {
      checkpoint = *found;
      // A whole checkpoint of another model than the config's: no older one
      // fits better, so this stops the resume.
      const auto opt_file = (fs::path(checkpoint) / "optimizer.safetensors").string();
      learners::actor_critic shape(*spec, 0);
      if (resumed_server->params.size() != shape.param_count() ||
          resumed_server->buffers.size() != shape.buffer_count())
        return make_error(errc::invalid_argument,
                          "{}: {} parameters and {} buffers, but the config's model "
                          "({}) has {} and {}",
                          opt_file, resumed_server->params.size(),
                          resumed_server->buffers.size(), cfg.get_string("env.id"),
                          shape.param_count(), shape.buffer_count());
      std::fprintf(stderr, "troupe: resuming from %s\n", checkpoint.c_str());
    }
    keep_rows_up_to((fs::path(run_dir) / "metrics.csv").string(), start.updates, true);
    keep_rows_up_to((fs::path(run_dir) / "metrics.jsonl").string(), start.updates, false);
  } else {
    run_dir = (fs::path(cfg.get_string("run.output_dir")) /
               (cfg.get_string("run.name") + "-" + timestamp()))
                .string();
    std::error_code ec;
    for (int k = 2; fs::exists(run_dir); ++k)
      run_dir = (fs::path(cfg.get_string("run.output_dir")) /
                 fmt::format("{}-{}-{}", cfg.get_string("run.name"), timestamp(), k))
                  .string();
    fs::create_directories(fs::path(run_dir) / "checkpoints", ec);
    if (ec)
      return make_error(errc::io_error, "cannot create {}: {}", run_dir, ec.message());
    const std::string text = cfg.to_toml();
    if (auto ok = learners::write_file_atomically(
          (fs::path(run_dir) / "config.toml").string(), text.data(), text.size());
        !ok)
      return ok.err();
  }
  const uint64_t resume_salt = start.updates * 0x9e3779b97f4a7c15ull;

  // -- the actor system -------------------------------------------------------
  caf::actor_system_config sys_cfg;
  actors::register_messages(sys_cfg);
  sys_cfg.set("scheduler.max-threads", static_cast<size_t>(cfg.get_int("run.threads")));
  sys_cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system sys(sys_cfg);
  caf::scoped_actor self(sys);

  // -- the cast, as a plan for the supervisor ---------------------------------
  actors::cast_plan plan;
  plan.keeper.mode = cfg.get_string("stats.mode");
  plan.keeper.momentum = cfg.get_float("stats.momentum");
  plan.keeper.publish_every_merges =
    static_cast<uint64_t>(cfg.get_int("stats.publish_every_merges"));
  plan.keeper.publish_interval_ms =
    static_cast<uint64_t>(cfg.get_int("stats.publish_interval_ms"));
  cast c;
  c.spec = *spec;
  c.env_id = (*env_spec)->id;
  c.algo = algo_name;
  c.obs_norm = obs_norm;

  learners::actor_critic initial(*spec, seed);
  plan.store = std::make_shared<actors::policy_store>(
    initial, static_cast<size_t>(cfg.get_int("algo.max_staleness")) + 64);
  plan.server.sync = sync;
  plan.server.num_learners = num_learners;
  plan.server.max_staleness = static_cast<uint64_t>(cfg.get_int("algo.max_staleness"));
  plan.server.max_grad_norm = cfg.get_float("algo.max_grad_norm");
  plan.server.adam.lr = cfg.get_float("algo.learning_rate");
  plan.server.adam.eps = cfg.get_float("algo.adam_eps");
  plan.params.assign(initial.params(), initial.params() + initial.param_count());
  plan.buffers.assign(initial.buffers(), initial.buffers() + initial.buffer_count());
  if (!checkpoint.empty()) {
    plan.server_state = std::move(resumed_server);
    plan.keeper_state = (fs::path(checkpoint) / "stats.bin").string();
  }

  plan.max_runner_restarts =
    static_cast<uint64_t>(cfg.get_int("run.max_runner_restarts"));
  plan.max_learner_restarts =
    static_cast<uint64_t>(cfg.get_int("run.max_learner_restarts"));
  plan.metrics.csv_path = (fs::path(run_dir) / "metrics.csv").string();
  plan.metrics.jsonl_path = (fs::path(run_dir) / "metrics.jsonl").string();
  plan.metrics.log_every_updates =
    static_cast<uint64_t>(cfg.get_int("run.log_every_updates"));
  plan.metrics.checkpoint_every_updates =
    static_cast<uint64_t>(cfg.get_int("run.checkpoint_every_updates"));
  plan.metrics.total_env_steps = total;
  plan.metrics.progress_line = isatty(STDOUT_FILENO) != 0;
  plan.metrics.start = start;

  // Global batch norm: one keeper stream per layer, named by its prefix,
  // cumulative or ema (PyTorch's momentum m is the keeper's 1 - m). Ema with
  // a delta per minibatch moves too fast to learn with (docs/experiments.md).
  if (spec->batch_norm == learners::batch_norm_mode::global) {
    for (auto& layer : initial.batch_norm_layers()) {
      plan.streams.push_back(actors::stream_decl{
        layer.prefix, static_cast<uint64_t>(layer.width),
        cfg.get_string("model.batch_norm_stats"), 1.0 - spec->batch_norm_momentum});
      plan.batch_norm_streams.emplace_back(layer.prefix,
                                           static_cast<size_t>(layer.width));
    }
  }
  // The observation stream exists before any view subscribes to it (the
  // runners declare it too; declaring again is a no-op).
  if (obs_norm) {
    plan.streams.push_back(actors::stream_decl{"obs",
                                               static_cast<uint64_t>(spec->obs_dim),
                                               plan.keeper.mode, plan.keeper.momentum});
    plan.obs_stream = "obs";
    plan.obs_dim = static_cast<size_t>(spec->obs_dim);
  }
  const double obs_scale = cfg.get_float("env.obs_scale");
  const double obs_spread = cfg.get_float("env.obs_scale_spread");

  // -- learners and their runners ---------------------------------------------
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
  for (uint64_t li = 0; li < num_learners; ++li) {
    actors::learner_plan lp;
    auto& lo = lp.options;
    lo.name = fmt::format("learner{}", li);
    lo.algo = algo_name == "impala" ? actors::algorithm::impala
              : algo_name == "a3c"  ? actors::algorithm::a3c
                                    : actors::algorithm::ppo;
    lo.spec = *spec;
    lo.ppo.clip_coef = cfg.get_float("algo.clip_coef");
    lo.ppo.vf_coef = cfg.get_float("algo.vf_coef");
    lo.ppo.ent_coef = cfg.get_float("algo.ent_coef");
    lo.ppo.clip_value_loss = cfg.get_bool("algo.clip_vloss");
    lo.ppo.normalize_advantages = cfg.get_bool("algo.norm_adv");
    lo.vtrace.rho_bar = cfg.get_float("algo.rho_bar");
    lo.vtrace.pg_rho_bar = cfg.get_float("algo.pg_rho_bar");
    lo.vtrace.c_bar = cfg.get_float("algo.c_bar");
    lo.vtrace.baseline_coef = cfg.get_float("algo.vf_coef");
    lo.vtrace.ent_coef = cfg.get_float("algo.ent_coef");
    lo.gamma = cfg.get_float("algo.gamma");
    lo.gae_lambda = cfg.get_float("algo.gae_lambda");
    lo.update_epochs = static_cast<size_t>(cfg.get_int("algo.update_epochs"));
    lo.num_minibatches = static_cast<size_t>(cfg.get_int("algo.num_minibatches"));
    lo.learning_rate = cfg.get_float("algo.learning_rate");
    lo.anneal_lr = cfg.get_bool("algo.anneal_lr");
    lo.num_runners = runners_per_learner;
    lo.steps_per_runner_batch = num_steps * num_envs;
    for (size_t ri = 0; ri < runners_per_learner; ++ri)
      lo.runner_batch_steps.push_back(num_steps *
                                      envs_of_slot(li * runners_per_learner + ri));
    lo.pipelined = !sync;
    lo.seed = seed * 7919 + li + resume_salt;
    if (auto g = learner_gens.find(lo.name); g != learner_gens.end())
      lo.start_gen = g->second;
    lo.device = device->kind;
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
  const std::string env_id = (*env_spec)->id;
  const size_t env_threads = static_cast<size_t>(cfg.get_int("env.threads"));
  // The checkpoint's model (and so troupe eval) normalizes with the same epsilon.
  const double eps = cfg.get_float("model.obs_norm_eps");
  const double clip = cfg.get_float("model.obs_norm_clip");
  const bool box = spec->action == learners::action_kind::box;
  plan.make_runner = [&sys, store = plan.store, env_id, envs_of_slot, env_threads,
                      num_steps, seed, runners_per_learner, obs_norm, eps, clip, box,
                      resume_salt, obs_scale, obs_spread, saved_runners,
                      obs_dim = spec->obs_dim](const actors::runner_request& req) {
    const uint64_t slot = req.learner * runners_per_learner + req.index;
    const size_t n = envs_of_slot(slot);
    auto env = envs::make_vector_env(env_id, n, env_threads);
    std::shared_ptr<envs::vector_env> shared(std::move(*env));
    if (box)
      shared->set_clip_box_actions(true);
    actors::env_runner_options ro;
    ro.name = req.name;
    ro.seed = seed + slot * n + req.restarts * 1000003ull + resume_salt;
    ro.steps_per_batch = num_steps;
    ro.obs_epsilon = eps;
    ro.obs_clip = clip;
    ro.obs_scale = obs_scale * std::pow(obs_spread, static_cast<double>(slot));
    // Resume: a runner's first incarnation continues its saved state when it
    // fits (the same env id and number of environments).
    if (auto saved = saved_runners->find(req.name);
        req.restarts == 0 && saved != saved_runners->end()) {
      if (auto fits = actors::check_runner_state(saved->second, *shared, req.name); fits)
        ro.start_state = saved->second;
      else
        std::fprintf(stderr, "troupe: not continuing the saved runner state: %s\n",
                     fits.err().message.c_str());
    }
    // The view holds the keeper's current snapshot before the runner's first
    // step: a resumed or restarted runner acts on normalized observations.
    std::shared_ptr<learners::stats_view> view;
    if (obs_norm) {
      auto v =
        actors::subscribe_view(sys, req.keeper, "obs", static_cast<size_t>(obs_dim));
      if (!v) {
        std::fprintf(stderr, "troupe: runner '%s': %s\n", req.name.c_str(),
                     v.err().message.c_str());
        return caf::actor{};
      }
      view = std::move(*v);
    }
    auto policy = actors::make_store_policy(store, num_steps);
    return actors::spawn_env_runner(sys, ro, shared, policy, req.consumer, req.keeper,
                                    view);
  };

  // -- supervising the run ----------------------------------------------------
  stop_signal.store(0);
  auto old_int = std::signal(SIGINT, on_stop_signal);
  auto old_term = std::signal(SIGTERM, on_stop_signal);
  actors::supervisor_options sup_opts;
  sup_opts.cast = std::move(plan);
  sup_opts.owner = caf::actor_cast<caf::actor>(self);
  // The signal handler writes the static flag; the supervisor polls it.
  sup_opts.stop_flag = std::shared_ptr<std::atomic<int>>(&stop_signal, [](auto*) {});
  auto supervisor = actors::spawn_supervisor(sys, std::move(sup_opts));
  self->monitor(supervisor);
  bool finished = false, stopping = false, ready = false;
  std::string failure;
  std::string write_failure; // a checkpoint or metrics file that could not be written
  std::optional<actors::cast_snapshot> last_snapshot;
  const size_t keep_checkpoints =
    static_cast<size_t>(cfg.get_int("run.keep_checkpoints"));
  auto checkpoint_with = [&](const actors::cast_snapshot& snap) {
    auto ok = write_checkpoint(self, c, run_dir, seed, snap);
    if (ok)
      prune_checkpoints(run_dir, keep_checkpoints);
    return ok;
  };
  // A checkpoint while training goes on: the supervisor collects the cast's
  // random states. It ends right after sending its final snapshot (already in
  // our mailbox then), so a checkpoint due at that moment finds it gone and is
  // left to the final checkpoint, which is written from that snapshot.
  auto periodic_checkpoint = [&] {
    std::optional<actors::cast_snapshot> snap;
    self->request(supervisor, caf::infinite, actors::state_atom::value)
      .receive([&](actors::cast_snapshot& s) { snap = std::move(s); },
               [&](caf::error& e) {
                 if (e != caf::sec::request_receiver_down)
                   std::fprintf(stderr, "troupe: checkpoint failed: %s\n",
                                actors::error_message(sys, e).c_str());
               });
    if (!snap)
      return;
    if (auto ok = checkpoint_with(*snap); !ok && write_failure.empty()) {
      // A run that cannot save its progress stops rather than train on
      // unsaved: the previous checkpoint stays as it was.
      write_failure = "checkpoint failed: " + ok.err().message;
      std::fprintf(stderr, "troupe: %s; stopping the run\n", write_failure.c_str());
      self->send(supervisor, actors::stop_atom::value);
    }
  };
  while (!finished) {
    self->receive(
      [&](actors::ready_atom, caf::actor& keeper, caf::actor& server,
          caf::actor& metrics) {
        c.keeper = keeper;
        c.server = server;
        c.metrics = metrics;
        c.supervisor = supervisor;
        ready = true;
        std::printf("troupe: run folder %s; learners on %s (%s)\n", run_dir.c_str(),
                    learners::to_string(device->kind), device->reason.c_str());
        std::fflush(stdout);
        // A first checkpoint at once, so that a run killed at any moment resumes.
        if (checkpoint.empty())
          periodic_checkpoint();
      },
      [&](actors::ckpt_atom, uint64_t) { periodic_checkpoint(); },
      [&](actors::cast_snapshot& snap) { last_snapshot = std::move(snap); },
      [&](actors::done_atom, bool interrupted, std::string& why) {
        finished = true;
        stopping = interrupted;
        failure = why;
      },
      [&](caf::down_msg& down) {
        if (down.source != supervisor.address() || finished)
          return;
        finished = true;
        failure = "the supervisor ended: " + actors::error_message(sys, down.reason);
      });
  }
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
  if (!ready) {
    // Nothing started (a resume whose statistics file does not load, ...).
    return make_error(errc::unavailable, "the run could not start: {}", failure);
  }
  // The metrics actor stops the run itself when it cannot write its files.
  if (write_failure.empty())
    if (auto why = ask<std::string>(self, c.metrics, actors::status_atom::value);
        why && !why->empty())
      write_failure = *why;
  if (!write_failure.empty())
    std::fprintf(stderr, "troupe: stopped: %s; writing the final checkpoint\n",
                 write_failure.c_str());
  else if (stopping)
    std::fprintf(stderr, "\ntroupe: stopped (signal %d); writing the final checkpoint\n",
                 stop_signal.load());
  else if (!failure.empty())
    std::fprintf(stderr, "troupe: %s; writing a final checkpoint from what is left\n",
                 failure.c_str());

  training_result out;
  out.run_dir = run_dir;
  out.interrupted = stopping;
  auto final_counters =
    ask<actors::metrics_counters>(self, c.metrics, actors::row_atom::value);
  if (final_counters) {
    out.env_steps = final_counters->env_steps;
    out.updates = final_counters->updates;
    double sum = 0;
    for (double r : final_counters->recent_returns)
      sum += r;
    out.return_mean_100 =
      final_counters->recent_returns.empty()
        ? NAN
        : sum / static_cast<double>(final_counters->recent_returns.size());
  }
  if (!last_snapshot) {
    // The supervisor ended without its final snapshot: ask once more, else
    // save none (a resumed run then starts its runners and learners fresh).
    if (auto asked =
          ask<actors::cast_snapshot>(self, supervisor, actors::state_atom::value)) {
      last_snapshot = std::move(*asked);
    } else {
      std::fprintf(stderr,
                   "troupe: the final checkpoint holds no runner or learner states "
                   "(%s); a resumed run starts them fresh\n",
                   asked.err().message.c_str());
      last_snapshot.emplace();
    }
  }
  auto final_ckpt = checkpoint_with(*last_snapshot);
  if (!final_ckpt)
    std::fprintf(stderr, "troupe: final checkpoint failed: %s\n",
                 final_ckpt.err().message.c_str());
#ifdef TROUPE_HAVE_PLOT
  if (auto ok = write_curve_svg(run_dir, (fs::path(run_dir) / "curve.svg").string()); !ok)
    std::fprintf(stderr, "troupe: curve.svg: %s\n", ok.err().message.c_str());
#endif
  self->send_exit(c.metrics, caf::exit_reason::user_shutdown);
  self->send_exit(c.server, caf::exit_reason::user_shutdown);
  self->send_exit(c.keeper, caf::exit_reason::user_shutdown);
  if (!failure.empty())
    return make_error(errc::unavailable, "the run failed: {}", failure);
  if (!write_failure.empty())
    return make_error(errc::io_error, "the run stopped: {}", write_failure);
  if (!final_ckpt)
    return final_ckpt.err();
  return out;
}

} // namespace troupe::runtime
