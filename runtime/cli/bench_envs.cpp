// `troupe bench envs [--json] [--env ID] [--seconds S] [--rounds R]
// [--memory-envs N]`:
// environment steps per second for every registered environment, through
// the single-environment interface and vectorized (1, 16, 256, 4096
// environments; MuJoCo tasks 1, 16, 64, 256) on one thread and on all
// cores. Actions come from a pre-drawn pool of random valid actions, so the
// figures measure the environments, not a policy. Every step's status is
// checked: a failed step fails the benchmark instead of being counted.
//
// Each MuJoCo row sits beside its floor: a bare loop of mj_step on the
// task's compiled model, as many mjData as environments, the same actions,
// the same frame skip and mj_rnePostConstraint, split over the same threads,
// and reset (mj_resetData, mj_forward) where the environments' episodes
// ended; and the same loop without resets. With --rounds R the env and its
// floors are measured R times, alternating, and the best of each is kept, so
// that both see the same moments of a changing load. A memory row per MuJoCo
// task gives the resident memory that N environments add.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "envs/mujoco/tasks.hpp"
#include "envs/registry.hpp"
#include "base/worker_pool.hpp"
#include "runtime/cli/args.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/json.hpp"

namespace troupe::runtime {

namespace {

using clock_type = std::chrono::steady_clock;

struct bench_row {
  std::string env;
  std::string api; // "env" (one environment, virtual interface) or "vector"
  size_t num_envs;
  size_t threads;
  size_t threads_used;
  double steps_per_s;
  bool has_floor = false;       // a MuJoCo row: the two floors below are set
  double floor_steps_per_s = 0; // the bare loop, reset where the env's episodes ended
  double floor_no_reset_steps_per_s = 0; // the bare loop, never reset
};

// The resident memory that N environments of a MuJoCo task add.
struct memory_row {
  std::string env;
  size_t num_envs;
  double rss_growth_bytes;
};

// Runs `step(k)` (returning a status) in growing rounds until `seconds` have
// passed; returns calls per second, or the first failed call's error with
// its call number.
template <class Step>
result<double> calls_per_second(double seconds, Step&& step) {
  auto failed = [](size_t k, const status& st) {
    return make_error(st.err().code, "step call {} failed: {}", k, st.err().message);
  };
  for (size_t k = 0; k < 64; ++k) // warm-up
    if (auto st = step(k); !st.ok())
      return failed(k, st);
  size_t calls = 0;
  size_t round = 64;
  auto start = clock_type::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (size_t k = 0; k < round; ++k)
      if (auto st = step(calls + k); !st.ok())
        return failed(64 + calls + k, st);
    calls += round;
    round *= 2;
    elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
  }
  return static_cast<double>(calls) / elapsed;
}

// -- the MuJoCo floor ------------------------------------------------------------

// Which environments reset in each call of a measured run, recorded as it
// ran, so the floor resets at the same points. Stops recording at a cap; the
// floor cycles over what was recorded.
struct reset_pattern {
  size_t num_envs = 0;
  std::vector<uint8_t> resets; // [calls x num_envs]
  static constexpr size_t max_bytes = size_t{1} << 24;

  void record(const uint8_t* flags) {
    if (resets.size() + num_envs <= max_bytes)
      resets.insert(resets.end(), flags, flags + num_envs);
  }
  size_t calls() const { return resets.size() / num_envs; }
  const uint8_t* call(size_t k) const { return &resets[(k % calls()) * num_envs]; }
};

struct data_deleter {
  void operator()(mjData* d) const noexcept { mj_deleteData(d); }
};

// `num_envs` mjData of one task's model stepped bare on `threads` threads,
// split into the vector env's contiguous ranges.
class mujoco_floor {
public:
  mujoco_floor(envs::mujoco::task_physics physics, size_t num_envs, size_t threads)
    : physics_(std::move(physics)), threads_(threads) {
    const mjModel* m = physics_.model.get();
    for (size_t i = 0; i < num_envs; ++i) {
      data_.emplace_back(mj_makeData(m));
      TROUPE_CHECK(data_.back() != nullptr, "MuJoCo cannot allocate a floor mjData");
      mj_forward(m, data_.back().get());
    }
    if (threads_ > 1)
      pool_ = std::make_unique<base::worker_pool>(threads_ - 1);
  }

  // One call: environment i resets (mj_resetData, mj_forward) where
  // resets[i] (null: none) and steps with action row i otherwise; with
  // `reset_after_step` it steps and then resets, as a single env does.
  void step(const float* actions, const uint8_t* resets, bool reset_after_step) {
    auto range = [&](size_t k) {
      const size_t n = data_.size();
      for (size_t i = n * k / threads_, end = n * (k + 1) / threads_; i < end; ++i)
        step_one(i, actions + i * static_cast<size_t>(physics_.model->nu),
                 resets && resets[i], reset_after_step);
    };
    if (threads_ == 1)
      range(0);
    else
      pool_->run(threads_, range);
  }

  /// Floats per action.
  size_t action_dim() const { return static_cast<size_t>(physics_.model->nu); }

private:
  void step_one(size_t i, const float* action, bool reset, bool reset_after_step) {
    const mjModel* m = physics_.model.get();
    mjData* d = data_[i].get();
    if (!reset || reset_after_step) {
      for (int j = 0; j < m->nu; ++j)
        d->ctrl[j] = static_cast<double>(action[j]);
      for (int k = 0; k < physics_.frame_skip; ++k)
        mj_step(m, d);
      mj_rnePostConstraint(m, d);
    }
    if (reset) {
      mj_resetData(m, d);
      mj_forward(m, d);
    }
  }

  envs::mujoco::task_physics physics_;
  size_t threads_;
  std::vector<std::unique_ptr<mjData, data_deleter>> data_;
  std::unique_ptr<base::worker_pool> pool_;
};

// Steps per second of floor `f` replaying `pattern` (or never resetting),
// with the environments' action pool of `batches` rows of num_envs actions.
result<double> floor_rate(mujoco_floor& f, const reset_pattern& pattern, bool with_resets,
                          bool reset_after_step, const std::vector<float>& pool,
                          size_t batches, double seconds) {
  const size_t n = pattern.num_envs;
  const size_t ad = f.action_dim();
  size_t call = 0;
  auto rate = calls_per_second(seconds, [&](size_t) -> status {
    f.step(pool.data() + (call % batches) * n * ad,
           with_resets ? pattern.call(call) : nullptr, reset_after_step);
    ++call;
    return ok_status();
  });
  if (!rate)
    return rate;
  return *rate * static_cast<double>(n);
}

// -- memory ------------------------------------------------------------------------

// Resident bytes of this process (/proc/self/statm), after giving freed heap
// memory back to the system so that earlier rows' memory is not reused
// unseen; 0 where there is no /proc.
double resident_bytes() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
  std::ifstream statm("/proc/self/statm");
  double size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages))
    return 0;
  return resident_pages * static_cast<double>(sysconf(_SC_PAGESIZE));
}

} // namespace

int bench_envs(const args_t& args) {
  static const std::vector<arg_spec> specs = {
    {"json", false, false, "print a JSON array"},
    {"env", true, false, "measure only this environment id"},
    {"seconds", true, false, "measuring time per figure (default 0.25)"},
    {"rounds", true, false,
     "MuJoCo rows: measure the env and its floors this many times, alternating, "
     "and keep the best of each (default 1)"},
    {"memory-envs", true, false,
     "MuJoCo tasks: resident memory of this many environments (default 64, 0: none)"},
  };
  auto parsed = parse_args("troupe bench envs", args, specs);
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  auto seconds = parsed->get_float("seconds", 0.25, 0.001, 60.0);
  if (!seconds)
    return fail(exit_bad_input, seconds.err().message);
  auto rounds = parsed->get_int("rounds", 1, 1, 100);
  if (!rounds)
    return fail(exit_bad_input, rounds.err().message);
  auto memory_envs = parsed->get_int("memory-envs", 64, 0, 1024);
  if (!memory_envs)
    return fail(exit_bad_input, memory_envs.err().message);
  std::vector<std::string> ids = envs::registered_ids();
  if (auto only = parsed->get("env")) {
    if (auto spec = envs::find_spec(*only); !spec)
      return fail(exit_bad_input, fmt::format("--env: {}", spec.err().message));
    ids = {*only};
  }
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  std::vector<size_t> thread_counts = {1};
  if (cores > 1)
    thread_counts.push_back(cores);
  const bool json = parsed->flag("json");
  std::mt19937_64 gen(12345);
  std::vector<bench_row> rows;
  std::vector<memory_row> memory_rows;
  auto report = [&](const bench_row& row) {
    rows.push_back(row);
    if (!json) {
      std::printf("%-26s %-7s %6zu %8zu %8zu %14.0f", row.env.c_str(), row.api.c_str(),
                  row.num_envs, row.threads, row.threads_used, row.steps_per_s);
      if (row.has_floor)
        std::printf(" %12.0f %6.3f %14.0f", row.floor_steps_per_s,
                    row.steps_per_s / row.floor_steps_per_s,
                    row.floor_no_reset_steps_per_s);
      std::printf("\n");
    }
    std::fflush(stdout);
  };
  if (!json)
    std::printf("%-26s %-7s %6s %8s %8s %14s %12s %6s %14s\n", "env", "api", "envs",
                "threads", "used", "steps/s", "floor", "ratio", "floor no reset");

  for (auto& id : ids) {
    const bool mujoco = envs::mujoco::is_task(id);
    envs::mujoco::task_physics physics;
    if (mujoco)
      physics = envs::mujoco::physics_of(id).value();
    // Measures `row` (measure_env() gives the env's steps per second) and,
    // for a MuJoCo task, its floors, in alternating rounds, keeping the best
    // of each: env and floor see the same moments of a changing load.
    auto measure_row = [&](bench_row& row, auto&& measure_env,
                           const reset_pattern& pattern, bool reset_after_step,
                           const std::vector<float>& pool, size_t batches) -> status {
      std::unique_ptr<mujoco_floor> floor;
      for (int64_t round = 0; round < (mujoco ? *rounds : 1); ++round) {
        result<double> rate = measure_env();
        if (!rate)
          return rate.err();
        row.steps_per_s = std::max(row.steps_per_s, *rate);
        if (!mujoco)
          continue;
        if (!floor)
          floor = std::make_unique<mujoco_floor>(physics, row.num_envs, row.threads_used);
        for (bool with_resets : {true, false}) {
          auto floor_steps = floor_rate(*floor, pattern, with_resets, reset_after_step,
                                        pool, batches, *seconds);
          if (!floor_steps)
            return floor_steps.err();
          double& best =
            with_resets ? row.floor_steps_per_s : row.floor_no_reset_steps_per_s;
          best = std::max(best, *floor_steps);
        }
        row.has_floor = true;
      }
      return ok_status();
    };
    if (mujoco && *memory_envs > 0) {
      // Resident memory of N environments, reset and stepped a little (MuJoCo
      // touches its stack as it steps).
      const size_t n = static_cast<size_t>(*memory_envs);
      auto pool = envs::random_actions(envs::find_spec(id).value()->action_space, n, gen);
      const double before = resident_bytes();
      auto v = envs::make_vector_env(id, n, 1).value();
      v->reset(1);
      for (int k = 0; k < 16; ++k)
        if (auto st = v->step(pool.data()); !st.ok())
          return fail(exit_failure, fmt::format("bench envs: {} (memory of {}): {}", id,
                                                n, st.err().message));
      const double growth = resident_bytes() - before;
      memory_rows.push_back({id, n, growth});
      if (!json)
        std::printf("%-26s %-7s %6zu %14.0f bytes resident (%.0f per env)\n", id.c_str(),
                    "memory", n, growth, growth / static_cast<double>(n));
    }
    // One environment through the virtual single-env interface, as a
    // Gymnasium user steps gym.make(id).
    {
      auto e = envs::make_env(id).value();
      const auto& as = e->spec().action_space;
      auto pool = envs::random_actions(as, 1024, gen);
      std::vector<float> obs(e->spec().observation_space.size());
      e->reset(1, obs.data());
      reset_pattern pattern{1, {}};
      size_t call = 0;
      auto measure_env = [&] {
        return calls_per_second(*seconds, [&](size_t) -> status {
          auto r = e->step(pool.data() + (call++ % 1024) * as.size(), obs.data());
          if (!r)
            return r.err();
          const uint8_t done = r->terminated || r->truncated;
          if (done)
            e->reset(obs.data());
          if (mujoco)
            pattern.record(&done);
          return ok_status();
        });
      };
      bench_row row{id, "env", 1, 1, 1, 0.0};
      if (auto ok = measure_row(row, measure_env, pattern, true, pool, 1024); !ok)
        return fail(exit_failure,
                    fmt::format("bench envs: {} (single env): {}", id, ok.err().message));
      report(row);
    }
    for (size_t n : {size_t{1}, size_t{16}, size_t{64}, size_t{256}, size_t{4096}}) {
      // A MuJoCo environment holds a few MB of simulation data: 4096 of them
      // would take over 10 GB, and 256 already show the vector's rate; 64 is
      // measured for MuJoCo only.
      if (mujoco ? n > 256 : n == 64)
        continue;
      for (size_t threads : thread_counts) {
        auto v = envs::make_vector_env(id, n, threads).value();
        const auto& as = v->spec().action_space;
        const size_t batches = 16;
        auto pool = envs::random_actions(as, n * batches, gen);
        v->reset(1);
        reset_pattern pattern{n, {}};
        size_t call = 0;
        auto measure_env = [&]() -> result<double> {
          auto rate = calls_per_second(*seconds, [&](size_t) {
            auto st = v->step(pool.data() + (call++ % batches) * n * as.size());
            if (mujoco)
              pattern.record(v->autoreset());
            return st;
          });
          if (!rate)
            return rate;
          return *rate * static_cast<double>(n);
        };
        bench_row row{id, "vector", n, threads, v->threads(), 0.0};
        if (auto ok = measure_row(row, measure_env, pattern, false, pool, batches); !ok)
          return fail(exit_failure,
                      fmt::format("bench envs: {} (vector of {} on {} threads): {}", id,
                                  n, threads, ok.err().message));
        report(row);
      }
    }
  }
  if (json) {
    runtime::json out = runtime::json::array();
    for (const auto& r : rows) {
      runtime::json row;
      row["env"] = r.env;
      row["api"] = r.api;
      row["num_envs"] = r.num_envs;
      row["threads"] = r.threads;
      row["threads_used"] = r.threads_used;
      row["steps_per_s"] = rounded(r.steps_per_s, 0);
      if (r.has_floor) {
        row["steps_per_s_per_core"] =
          rounded(r.steps_per_s / static_cast<double>(r.threads_used), 0);
        row["floor_steps_per_s"] = rounded(r.floor_steps_per_s, 0);
        row["ratio_to_floor"] = rounded(r.steps_per_s / r.floor_steps_per_s, 3);
        row["floor_no_reset_steps_per_s"] = rounded(r.floor_no_reset_steps_per_s, 0);
      }
      out.push_back(std::move(row));
    }
    for (const auto& r : memory_rows) {
      runtime::json row;
      row["env"] = r.env;
      row["api"] = "memory";
      row["num_envs"] = r.num_envs;
      row["rss_growth_bytes"] = rounded(r.rss_growth_bytes, 0);
      row["rss_growth_bytes_per_env"] =
        rounded(r.rss_growth_bytes / static_cast<double>(r.num_envs), 0);
      out.push_back(std::move(row));
    }
    std::fputs(json_line(out).c_str(), stdout);
  }
  return 0;
}

} // namespace troupe::runtime
