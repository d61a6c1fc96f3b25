#include "runtime/checkpoint_files.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "actors/messages.hpp"
#include "edge/runner_state_file.hpp"
#include "learners/checkpoint.hpp"
#include "learners/safetensors.hpp"
#include "learners/stats_view.hpp"
#include "runtime/ask.hpp"

namespace fs = std::filesystem;

namespace troupe::runtime {

namespace {

status write_text(const std::string& path, const std::string& text) {
  return learners::write_file_atomically(path, text.data(), text.size());
}

} // namespace

// Writes checkpoints/<updates>/ through <updates>.tmp, renamed when complete;
// on any failure the .tmp folder is removed, so nothing half written stays.
// `snap`: the cast's random states (runners, learners) to save with it.
result<std::string> write_checkpoint(caf::scoped_actor& self, const cast_handles& c,
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
    return ok.err();
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
    return ok.err();
  // The statistics keeper.
  auto saved = ask<caf::ok_atom>(self, c.keeper, actors::save_atom::value,
                                 (tmp / "stats.bin").string());
  if (!saved)
    return saved.err();
  // Every runner's state (environments, generators, episodes under way).
  if (auto ok =
        edge::save_runner_states((tmp / "runners.safetensors").string(), snap.runners);
      !ok)
    return ok.err();
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
    return ok.err();
  // Last, the manifest: what a resume checks before it trusts the folder.
  if (auto ok = learners::write_checkpoint_manifest(
        tmp.string(), {"policy.safetensors", "optimizer.safetensors", "stats.bin",
                       "runners.safetensors", "counters.txt"});
      !ok)
    return ok.err();
  fs::remove_all(final_dir, ec);
  fs::rename(tmp, final_dir, ec);
  if (ec)
    return make_error(errc::io_error, "cannot rename {} to {}: {}", tmp.string(),
                      final_dir.string(), ec.message());
  tmp_guard.renamed = true;
  return final_dir.string();
}

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

// Removes all but the `keep` newest checkpoints (keep 0: none removed).
void prune_checkpoints(const std::string& run_dir, size_t keep) {
  auto all = learners::checkpoint_folders(run_dir);
  if (keep == 0 || all.size() <= keep)
    return;
  std::error_code ec;
  for (size_t i = 0; i + keep < all.size(); ++i)
    fs::remove_all(all[i], ec);
}

} // namespace troupe::runtime
