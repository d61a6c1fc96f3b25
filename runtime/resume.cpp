#include "runtime/resume.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "edge/runner_state_file.hpp"
#include "learners/stats_streams.hpp"
#include "learners/checkpoint.hpp"
#include "learners/model.hpp"
#include "runtime/checkpoint_files.hpp"
#include "runtime/run_folder.hpp"

namespace fs = std::filesystem;

namespace troupe::runtime {

result<resume_point> read_resume_point(const std::string& resume_dir,
                                       const learners::model_spec& spec,
                                       const std::string& env_id,
                                       const actors::log_sink& log) {
  resume_point point;
  // A checkpoint that does not read back whole (a file cut short, missing or
  // changed since it was written) is reported, and the one before it is tried.
  auto load = [&](const std::string& folder) -> status {
    point = resume_point{};
    auto c = read_counters((fs::path(folder) / "counters.txt").string());
    if (!c)
      return c.err();
    point.start = std::move(c->counters);
    point.learner_gens = std::move(c->learner_gens);
    // Checkpoints written before runner states were saved have no file.
    const auto runners_file = fs::path(folder) / "runners.safetensors";
    if (fs::exists(runners_file)) {
      auto states = edge::load_runner_states(runners_file.string());
      if (!states)
        return states.err();
      for (auto& st : *states)
        point.runners->emplace(st.runner, std::move(st));
    }
    auto server = read_optimizer((fs::path(folder) / "optimizer.safetensors").string());
    if (!server)
      return server.err();
    point.server = std::move(*server);
    learners::stats_streams stats;
    if (auto ok = stats.load((fs::path(folder) / "stats.bin").string()); !ok)
      return ok.err();
    return {};
  };
  auto found =
    learners::newest_good_checkpoint(resume_dir, load, [&log](const std::string& why) {
      actors::write_log(log, actors::log_level::warning, "troupe: " + why);
    });
  if (!found && found.err().code != errc::not_found)
    return make_error(found.err().code, "cannot resume: {}", found.err().message);
  if (!found) {
    // Killed before its first checkpoint was complete: nothing was saved, so
    // the run starts over in its own folder.
    actors::write_log(
      log, actors::log_level::notice,
      fmt::format("troupe: {} has no complete checkpoint; starting the run "
                  "over",
                  resume_dir));
    return resume_point{};
  }
  point.checkpoint = *found;
  // A whole checkpoint of another model than the config's: no older one fits
  // better, so this stops the resume.
  const auto opt_file = (fs::path(point.checkpoint) / "optimizer.safetensors").string();
  learners::actor_critic shape(spec, 0);
  if (point.server->params.size() != shape.param_count() ||
      point.server->buffers.size() != shape.buffer_count())
    return make_error(errc::invalid_argument,
                      "{}: {} parameters and {} buffers, but the config's model "
                      "({}) has {} and {}",
                      opt_file, point.server->params.size(), point.server->buffers.size(),
                      env_id, shape.param_count(), shape.buffer_count());
  actors::write_log(log, actors::log_level::notice,
                    "troupe: resuming from " + point.checkpoint);
  return point;
}

status prepare_resumed_folder(const std::string& run_dir, const resume_point& point,
                              const std::vector<std::string>& metrics_columns) {
  if (point.checkpoint.empty())
    if (auto ok = ensure_checkpoints_folder(run_dir); !ok)
      return ok;
  trim_metrics(run_dir, point.start.updates, metrics_columns);
  trim_host_rows(run_dir, point.start.env_steps);
  return {};
}

} // namespace troupe::runtime
