// Tests of runtime::driver, the one loop that drives a run: the events a short
// CartPole run reports, in order, and the done event of a run whose cast
// cannot start.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "envs/registry.hpp"
#include "learners/backend.hpp"
#include "runtime/cast.hpp"
#include "runtime/checkpoint_files.hpp"
#include "runtime/config.hpp"
#include "runtime/driver.hpp"
#include "runtime/run_folder.hpp"
#include "tests/seed.hpp"
#include "tests/temp_folder.hpp"

using namespace troupe;
using troupe::test::temp_folder;

namespace fs = std::filesystem;

namespace {

// An event sink that records what the driver reports, in order; its
// checkpoints are written as the session writes them.
struct recording_events : runtime::run_events {
  std::string run_dir;
  uint64_t seed = 0;
  runtime::cast_handles handles;
  std::vector<std::string> kinds;           // "ready", "checkpoint", "progress", "done"
  std::vector<std::string> checkpoint_dirs; // what on_checkpoint wrote
  std::vector<uint64_t> progress_env_steps; // env_steps of each progress with counters
  std::vector<std::string> lines;           // the driver's own log lines
  int done_count = 0;
  bool done_ok = false;
  std::string done_message;

  std::string on_ready(caf::scoped_actor&, const caf::actor&,
                       const runtime::cast_handles& h) override {
    kinds.push_back("ready");
    handles = h;
    return {};
  }
  result<std::string> on_checkpoint(caf::scoped_actor& self,
                                    const actors::cast_snapshot& snap) override {
    kinds.push_back("checkpoint");
    auto dir = runtime::write_checkpoint(self, handles, run_dir, seed, snap);
    if (dir)
      checkpoint_dirs.push_back(*dir);
    return dir;
  }
  void on_log(actors::log_level, const std::string& line) override {
    lines.push_back(line);
  }
  void on_progress(const runtime::run_progress& p) override {
    kinds.push_back("progress");
    if (p.counters)
      progress_env_steps.push_back(p.counters->env_steps);
  }
  void on_done(const runtime::run_end&, const status& outcome) override {
    kinds.push_back("done");
    ++done_count;
    done_ok = outcome.ok();
    done_message = outcome.ok() ? std::string{} : outcome.err().message;
  }
};

// CartPole PPO from the shipped config, writing under `out`.
runtime::config cartpole(const fs::path& out, uint64_t seed, uint64_t steps,
                         uint64_t checkpoint_every) {
  auto cfg = runtime::load_config(
    std::string(TROUPE_SOURCE_DIR) + "/config/cartpole_ppo.toml",
    {fmt::format("run.output_dir=\"{}\"", out.string()), fmt::format("run.seed={}", seed),
     fmt::format("algo.total_env_steps={}", steps),
     fmt::format("run.checkpoint_every_updates={}", checkpoint_every),
     "run.device=\"cpu\""});
  INFO((cfg ? std::string{} : cfg.err().message));
  REQUIRE(cfg.ok());
  return *cfg;
}

// The plan of `cfg`'s run in `run_dir`, built in `sys`.
runtime::cast_build plan_for(caf::actor_system& sys, const runtime::config& cfg,
                             const std::string& run_dir) {
  auto env = envs::find_spec(cfg.get_string("env.id"));
  REQUIRE(env.ok());
  auto spec = runtime::model_spec_for(cfg, **env);
  REQUIRE(spec.ok());
  return runtime::build_cast(sys, cfg, *spec, **env, learners::device_kind::cpu, run_dir,
                             runtime::resume_point{}, runtime::cast_options{});
}

runtime::run_settings settings_for(runtime::cast_build built) {
  runtime::run_settings rs;
  rs.handles.spec = built.spec;
  rs.handles.env_id = built.env_id;
  rs.handles.algo = built.algo;
  rs.handles.obs_norm = built.obs_norm;
  rs.plan = std::move(built.plan);
  rs.first_checkpoint = true;
  return rs;
}

// The update count of checkpoint folder `dir` (its name).
uint64_t updates_of(const std::string& dir) {
  return std::stoull(fs::path(dir).filename().string());
}

} // namespace

TEST_CASE("a short run reports ready, then checkpoints and progress, then done once") {
  temp_folder tmp("driver-events");
  const uint64_t seed = test::fresh_seed() % 1000000;
  CAPTURE(seed);
  // 16 batches of 4 x 128 steps; a checkpoint every 5 updates.
  const uint64_t steps = 16 * 4 * 128;
  auto cfg = cartpole(tmp.path, seed, steps, 5);
  auto run_dir = runtime::create_run_folder(cfg);
  REQUIRE(run_dir.ok());
  auto drv = runtime::driver::create({});
  REQUIRE(drv.ok());
  recording_events events;
  events.run_dir = *run_dir;
  events.seed = static_cast<uint64_t>(cfg.get_int("run.seed"));
  status outcome;
  {
    caf::scoped_actor self((*drv)->system());
    outcome =
      (*drv)->run(self, settings_for(plan_for((*drv)->system(), cfg, *run_dir)), events);
  }
  CHECK(outcome.ok());
  CHECK(events.done_ok);
  CHECK(events.done_count == 1);
  INFO(fmt::format("events: {}", fmt::join(events.kinds, " ")));
  REQUIRE(events.kinds.size() >= 4);
  CHECK(events.kinds.front() == "ready");
  // The first checkpoint comes at once with ready (first_checkpoint).
  CHECK(events.kinds[1] == "checkpoint");
  CHECK(events.kinds.back() == "done");
  // One last refresh after the loop: the event before done is a progress.
  CHECK(events.kinds[events.kinds.size() - 2] == "progress");
  CHECK(std::count(events.kinds.begin(), events.kinds.end(), "ready") == 1);
  // Nothing but checkpoints and progress between ready and done.
  for (size_t i = 1; i + 1 < events.kinds.size(); ++i)
    CHECK((events.kinds[i] == "checkpoint" || events.kinds[i] == "progress"));
  // The checkpoints were written, in order of their update counts, within the run.
  REQUIRE(!events.checkpoint_dirs.empty());
  uint64_t last_updates = 0;
  for (size_t i = 0; i < events.checkpoint_dirs.size(); ++i) {
    const auto& dir = events.checkpoint_dirs[i];
    CAPTURE(dir);
    CHECK(fs::exists(fs::path(dir) / "manifest.txt"));
    const uint64_t u = updates_of(dir);
    if (i > 0)
      CHECK(u > last_updates);
    CHECK(u <= steps / (4 * 128));
    last_updates = u;
  }
  // The counters never go back, and the last one counts the whole budget.
  REQUIRE(!events.progress_env_steps.empty());
  CHECK(
    std::is_sorted(events.progress_env_steps.begin(), events.progress_env_steps.end()));
  CHECK(events.progress_env_steps.back() >= steps);
  CHECK(events.lines.empty()); // no checkpoint failed
  // Actor handles go before their system, which then ends.
  events.handles = runtime::cast_handles{};
  CHECK((*drv)->end_system());
}

TEST_CASE("a run whose cast cannot start reports done with the error and no ready") {
  temp_folder tmp("driver-no-start");
  const uint64_t seed = test::fresh_seed() % 1000000;
  CAPTURE(seed);
  auto cfg = cartpole(tmp.path, seed, 4 * 128 * 4, 0);
  auto run_dir = runtime::create_run_folder(cfg);
  REQUIRE(run_dir.ok());
  auto drv = runtime::driver::create({});
  REQUIRE(drv.ok());
  // Statistics that do not load: the supervisor gives up before ready.
  const auto bad_stats = tmp.write("stats.bin", "not a statistics file");
  recording_events events;
  events.run_dir = *run_dir;
  status outcome;
  {
    caf::scoped_actor self((*drv)->system());
    auto rs = settings_for(plan_for((*drv)->system(), cfg, *run_dir));
    rs.plan.keeper_state = bad_stats;
    outcome = (*drv)->run(self, std::move(rs), events);
  }
  REQUIRE_FALSE(outcome.ok());
  CHECK(outcome.err().code == errc::unavailable);
  CAPTURE(outcome.err().message);
  CHECK(outcome.err().message.find("the run could not start: ") == 0);
  CHECK(outcome.err().message.find(bad_stats) != std::string::npos);
  CHECK(events.kinds == std::vector<std::string>{"done"});
  CHECK(events.done_count == 1);
  CHECK_FALSE(events.done_ok);
  CHECK(events.done_message == outcome.err().message);
  CHECK((*drv)->end_system());
}

TEST_CASE("end_status says could not start, failed, stopped or fine, in that order") {
  runtime::run_end end;
  end.failure = "a learner ended";
  end.write_failure = "checkpoint failed: disk full";
  auto s = runtime::end_status(end);
  REQUIRE_FALSE(s.ok());
  CHECK(s.err().message == "the run could not start: a learner ended");
  end.ready = true;
  s = runtime::end_status(end);
  REQUIRE_FALSE(s.ok());
  CHECK(s.err().code == errc::unavailable);
  CHECK(s.err().message == "the run failed: a learner ended");
  end.failure.clear();
  s = runtime::end_status(end);
  REQUIRE_FALSE(s.ok());
  CHECK(s.err().code == errc::io_error);
  CHECK(s.err().message == "the run stopped: checkpoint failed: disk full");
  end.write_failure.clear();
  CHECK(runtime::end_status(end).ok());
}

TEST_CASE(
  "a resume keeps the hosts.csv rows up to the checkpoint's env steps, the header "
  "and quoted host names, and drops later rows and a row cut off mid-line") {
  temp_folder dir("troupe-hosts-trim");
  const uint64_t seed = troupe::test::fresh_seed();
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  const std::string header = "wall_time_s,env_steps,host,host_env_steps,host_updates,"
                             "host_episodes,host_sps,policy_lag_mean,return_mean";
  std::string text = header + "\n", want = header + "\n";
  uint64_t steps = 0;
  const uint64_t cut = 1000 + rng() % 100000;
  for (int row = 0; row < 40; ++row) {
    steps += 1 + rng() % 5000;
    for (const std::string host : {"\"w,1\"", "w2"}) {
      const auto line =
        fmt::format("{}.5,{},{},{},3,1,12.5,2,", row, steps, host, steps / 2);
      text += line + "\n";
      if (steps <= cut)
        want += line + "\n";
    }
  }
  text += "99.5,1"; // killed while writing
  const auto path = dir.path / "hosts.csv";
  {
    std::ofstream out(path, std::ios::binary);
    out << text;
  }
  runtime::trim_host_rows(dir.path.string(), cut);
  std::ifstream in(path, std::ios::binary);
  const std::string got((std::istreambuf_iterator<char>(in)),
                        std::istreambuf_iterator<char>());
  CHECK(got == want);
  // No file: nothing happens.
  runtime::trim_host_rows((dir.path / "none").string(), cut);
  CHECK_FALSE(fs::exists(dir.path / "none" / "hosts.csv"));
}
