// `troupe bench envs [--json] [--env ID] [--seconds S]`: environment steps per
// second for every registered environment, through the single-environment
// interface and vectorized (1, 16, 256, 4096 environments) on one thread and
// on all cores. Actions come from a pre-drawn pool of random valid actions,
// so the figures measure the environments, not a policy. Every step's status
// is checked: a failed step fails the benchmark instead of being counted.
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "envs/mujoco/tasks.hpp"
#include "envs/registry.hpp"
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

} // namespace

int bench_envs(const args_t& args) {
  static const std::vector<arg_spec> specs = {
    {"json", false, false, "print a JSON array"},
    {"env", true, false, "measure only this environment id"},
    {"seconds", true, false, "measuring time per figure (default 0.25)"},
  };
  auto parsed = parse_args("troupe bench envs", args, specs);
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  auto seconds = parsed->get_float("seconds", 0.25, 0.001, 60.0);
  if (!seconds)
    return fail(exit_bad_input, seconds.err().message);
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
  auto report = [&](const bench_row& row) {
    rows.push_back(row);
    if (!json)
      std::printf("%-26s %-7s %6zu %8zu %8zu %14.0f\n", row.env.c_str(), row.api.c_str(),
                  row.num_envs, row.threads, row.threads_used, row.steps_per_s);
    std::fflush(stdout);
  };
  if (!json)
    std::printf("%-26s %-7s %6s %8s %8s %14s\n", "env", "api", "envs", "threads", "used",
                "steps/s");

  for (auto& id : ids) {
    // One environment through the virtual single-env interface, as a
    // Gymnasium user steps gym.make(id).
    {
      auto e = envs::make_env(id).value();
      const auto& as = e->spec().action_space;
      auto pool = envs::random_actions(as, 1024, gen);
      std::vector<float> obs(e->spec().observation_space.size());
      e->reset(1, obs.data());
      auto rate = calls_per_second(*seconds, [&](size_t k) -> status {
        auto r = e->step(pool.data() + (k % 1024) * as.size(), obs.data());
        if (!r)
          return r.err();
        if (r->terminated || r->truncated)
          e->reset(obs.data());
        return ok_status();
      });
      if (!rate)
        return fail(exit_failure, fmt::format("bench envs: {} (single env): {}", id,
                                              rate.err().message));
      report({id, "env", 1, 1, 1, *rate});
    }
    for (size_t n : {size_t{1}, size_t{16}, size_t{256}, size_t{4096}}) {
      // A MuJoCo environment holds a few MB of simulation data: 4096 of them
      // would take over 10 GB, and 256 already show the vector's rate.
      if (envs::mujoco::is_task(id) && n > 256)
        continue;
      for (size_t threads : thread_counts) {
        auto v = envs::make_vector_env(id, n, threads).value();
        const auto& as = v->spec().action_space;
        const size_t batches = 16;
        auto pool = envs::random_actions(as, n * batches, gen);
        v->reset(1);
        auto rate = calls_per_second(*seconds, [&](size_t k) {
          return v->step(pool.data() + (k % batches) * n * as.size());
        });
        if (!rate)
          return fail(exit_failure,
                      fmt::format("bench envs: {} (vector of {} on {} threads): {}", id,
                                  n, threads, rate.err().message));
        report({id, "vector", n, threads, v->threads(), *rate * static_cast<double>(n)});
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
      out.push_back(std::move(row));
    }
    std::fputs(json_line(out).c_str(), stdout);
  }
  return 0;
}

} // namespace troupe::runtime
