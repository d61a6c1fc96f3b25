// `troupe bench learner [--json]`: samples per second of one PPO training
// step (forward, hand-written backward, global-norm clipping and Adam) for
// hidden [64,64] and [256,256], batch 512 and 4096, on the CPU and, when
// present, the GPU; the same for one V-trace step at IMPALA's batch shapes
// (T x N = 32 x 32 and 16 x 64, [64,64]); and the acting rate of the store
// policy that environment runners use (actor forward and categorical
// sampling) on 32 and 256 observations per call. The floor beside it is the
// rate of Eigen's GEMM on the same machine, so the table says what fraction
// of the GEMM work rate the whole step reaches. benchmarks/torch_mlp.py
// times the PPO step in PyTorch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <cmath>
#include <random>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "actors/policy_store.hpp"
#include "base/rng.hpp"
#include "learners/backend.hpp"
#include "learners/cuda_plugin.hpp"
#include "learners/mlp.hpp"
#include "runtime/cli/args.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/json.hpp"

namespace troupe::runtime {

namespace {

using clock_type = std::chrono::steady_clock;

// The CartPole shape: 4 observations, 2 actions.
constexpr int64_t bench_obs_dim = 4;
constexpr int64_t bench_actions = 2;

struct bench_case {
  std::vector<int64_t> hidden;
  size_t batch;
};

/// What a row times.
enum class bench_kind { ppo, update, vtrace, act };

const char* to_string(bench_kind k) {
  switch (k) {
  case bench_kind::ppo:
    return "ppo";
  case bench_kind::update:
    return "ppo_update";
  case bench_kind::vtrace:
    return "vtrace";
  case bench_kind::act:
    break;
  }
  return "act";
}

// Minibatches of one whole-update row (one epoch).
constexpr size_t update_minibatches = 8;

struct bench_row {
  bench_kind kind = bench_kind::ppo;
  size_t steps = 0; ///< vtrace: T (batch = T x N)
  std::string device;
  std::vector<int64_t> hidden;
  size_t batch = 0;
  double samples_per_s = 0;
  double gflop_per_s = 0;
  double floor_gflop_per_s = 0; ///< cuda rows: cuBLAS SGEMM rate at [batch x h] * [h x h]
  unsigned threads =
    0; ///< cpu update rows: the learner's threads (2: actor and critic apart)
};

// Multiply-add FLOPs of the GEMMs of one forward and backward pass of both
// networks (the input gradient of the first layer is not computed).
double step_flops(const std::vector<int64_t>& hidden, size_t batch) {
  double total = 0;
  for (int64_t out_width : {bench_actions, int64_t{1}}) {
    int64_t in = bench_obs_dim;
    std::vector<int64_t> widths = hidden;
    widths.push_back(out_width);
    for (size_t l = 0; l < widths.size(); ++l) {
      double mac = static_cast<double>(in) * static_cast<double>(widths[l]);
      total += 2.0 * static_cast<double>(batch) * mac * (l == 0 ? 2.0 : 3.0);
      in = widths[l];
    }
  }
  return total;
}

// Multiply-add FLOPs of a forward pass of both networks over `rows` rows.
double forward_flops(const std::vector<int64_t>& hidden, size_t rows) {
  double total = 0;
  for (int64_t out_width : {bench_actions, int64_t{1}}) {
    int64_t in = bench_obs_dim;
    std::vector<int64_t> widths = hidden;
    widths.push_back(out_width);
    for (int64_t w : widths) {
      total += 2.0 * static_cast<double>(rows) * static_cast<double>(in * w);
      in = w;
    }
  }
  return total;
}

// "64x512,256x4096": hidden [W, W] and batch B per item; the error names the
// item and the rule.
result<std::vector<bench_case>> parse_bench_cases(const std::string& text) {
  std::vector<bench_case> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    unsigned long width = 0, batch = 0;
    char extra = 0;
    if (std::sscanf(item.c_str(), "%lux%lu%c", &width, &batch, &extra) != 2 ||
        width < 1 || width > 65536 || batch < 1 || batch > (size_t{1} << 24))
      return make_error(errc::bad_input,
                        "--cases: '{}' must be WIDTHxBATCH with WIDTH in [1, 65536] and "
                        "BATCH in [1, 16777216]",
                        item);
    out.push_back({{static_cast<int64_t>(width), static_cast<int64_t>(width)},
                   static_cast<size_t>(batch)});
    begin = end + 1;
  }
  return out;
}

// A backend for the CartPole-shaped model with `hidden`, loaded with seed 1's weights.
result<std::unique_ptr<learners::learner_backend>>
bench_backend(learners::device_kind device, const std::vector<int64_t>& hidden,
              const learners::backend_options& options = {}) {
  learners::model_spec spec;
  spec.obs_dim = bench_obs_dim;
  spec.n = bench_actions;
  spec.hidden = hidden;
  learners::actor_critic model(spec, 1);
  auto backend = learners::make_backend(device, spec, learners::adam_config{}, options);
  if (!backend)
    return backend.err();
  if (auto st = (*backend)->load(model.params(), model.buffers()); !st)
    return st.err();
  return backend;
}

// Steps taken and seconds spent by one timed training step, repeated.
struct timing {
  size_t steps = 0;
  double seconds = 0;
};

// Runs `step` 3 times untimed, then at least 5 times and `min_seconds`. A
// step copies its loss report back, so a GPU is synchronized each time.
template <class Step>
result<timing> time_steps(Step&& step, double min_seconds) {
  for (int i = 0; i < 3; ++i)
    if (auto st = step(); !st)
      return st.err();
  timing t;
  auto start = clock_type::now();
  do {
    if (auto st = step(); !st)
      return st.err();
    ++t.steps;
    t.seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  } while (t.seconds < min_seconds || t.steps < 5);
  return t;
}

// One optimizer step after a gradient: the part every training row shares.
status apply(learners::learner_backend& b, const result<learners::loss_report>& report,
             double lr) {
  if (!report)
    return report.err();
  if (auto norm = b.apply_gradient(lr, 0.5); !norm)
    return norm.err();
  return ok_status();
}

struct synthetic_batch {
  std::vector<float> obs, old_logp, adv, ret, old_v;
  std::vector<int64_t> actions;

  explicit synthetic_batch(size_t rows) {
    std::mt19937_64 rng(12345);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    obs.resize(rows * bench_obs_dim);
    for (auto& v : obs)
      v = normal(rng);
    actions.resize(rows);
    for (auto& a : actions)
      a = static_cast<int64_t>(rng() % bench_actions);
    old_logp.assign(rows, -0.69f);
    adv.resize(rows);
    ret.resize(rows);
    old_v.resize(rows);
    for (size_t r = 0; r < rows; ++r) {
      adv[r] = normal(rng);
      ret[r] = normal(rng);
      old_v[r] = normal(rng);
    }
  }

  learners::ppo_batch<float> view() const {
    return {actions.size(),  obs.data(), actions.data(), nullptr,
            old_logp.data(), adv.data(), ret.data(),     old_v.data()};
  }
};

result<bench_row> time_case(learners::device_kind device, const bench_case& c,
                            double min_seconds) {
  auto backend = bench_backend(device, c.hidden);
  if (!backend)
    return backend.err();
  auto& b = **backend;
  synthetic_batch data(c.batch);
  auto batch = data.view();
  learners::ppo_config config;
  auto timed = time_steps([&] { return apply(b, b.ppo_gradient(batch, config), 2.5e-4); },
                          min_seconds);
  if (!timed)
    return timed.err();
  const size_t steps = timed->steps;
  const double elapsed = timed->seconds;
  bench_row row;
  row.device = learners::to_string(device);
  row.hidden = c.hidden;
  row.batch = c.batch;
  row.samples_per_s = static_cast<double>(steps * c.batch) / elapsed;
  row.gflop_per_s =
    step_flops(c.hidden, c.batch) * static_cast<double>(steps) / elapsed / 1e9;
  return row;
}

// One whole PPO update (learner_backend::ppo_update): one epoch of
// update_minibatches minibatches of c.batch rows in a shuffled order, each a
// gradient, a clip and an Adam step; the CUDA backend replays it as one graph
// (its first two calls, untimed, size the buffers and capture it). Samples
// are the rows of every minibatch.
result<bench_row> time_update(learners::device_kind device, const bench_case& c,
                              double min_seconds, unsigned threads = 0) {
  learners::backend_options options;
  if (threads > 0) {
    // What a learner with algo.learner_threads = threads gets.
    options.threads = threads;
    options.split_networks = threads >= 2;
  }
  auto backend = bench_backend(device, c.hidden, options);
  if (!backend)
    return backend.err();
  auto& b = **backend;
  const size_t rows = c.batch * update_minibatches;
  synthetic_batch data(rows);
  std::vector<uint32_t> order(rows);
  for (size_t i = 0; i < rows; ++i)
    order[i] = static_cast<uint32_t>(i);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  learners::ppo_update_request request;
  request.batch = data.view();
  request.order = order.data();
  request.epochs = 1;
  request.minibatches = update_minibatches;
  request.lr = 2.5e-4;
  request.max_grad_norm = 0.5;
  learners::ppo_config config;
  auto timed = time_steps(
    [&]() -> status {
      auto r = b.ppo_update(request, config);
      if (!r)
        return r.err();
      if (!r->graph_error.empty())
        return make_error(errc::device_error, "the update could not be captured: {}",
                          r->graph_error);
      return ok_status();
    },
    min_seconds);
  if (!timed)
    return timed.err();
  bench_row row;
  row.kind = bench_kind::update;
  row.threads = threads;
  row.device = learners::to_string(device);
  row.hidden = c.hidden;
  row.batch = c.batch;
  const double updates = static_cast<double>(timed->steps);
  row.samples_per_s = updates * static_cast<double>(rows) / timed->seconds;
  row.gflop_per_s = step_flops(c.hidden, c.batch) * updates *
                    static_cast<double>(update_minibatches) / timed->seconds / 1e9;
  return row;
}

// One V-trace step (forward of T x N + N rows, backward of T x N, clip, Adam)
// on a synthetic batch; samples are the T x N transitions.
result<bench_row> time_vtrace(learners::device_kind device, std::vector<int64_t> hidden,
                              size_t steps, size_t envs, double min_seconds) {
  auto backend = bench_backend(device, hidden);
  if (!backend)
    return backend.err();
  auto& b = **backend;
  const size_t rows = steps * envs;
  synthetic_batch data(rows + envs); // observations of T x N + N rows
  std::vector<float> discounts(rows, 0.99f), rewards(rows, 1.0f);
  learners::vtrace_batch<float> batch;
  batch.steps = steps;
  batch.envs = envs;
  batch.obs = data.obs.data();
  batch.discrete_actions = data.actions.data();
  batch.behavior_logprob = data.old_logp.data();
  batch.rewards = rewards.data();
  batch.discounts = discounts.data();
  auto timed = time_steps(
    [&] { return apply(b, b.vtrace_gradient(batch, learners::vtrace_config{}), 2e-3); },
    min_seconds);
  if (!timed)
    return timed.err();
  const size_t done = timed->steps;
  const double elapsed = timed->seconds;
  bench_row row;
  row.kind = bench_kind::vtrace;
  row.steps = steps;
  row.device = learners::to_string(device);
  row.hidden = hidden;
  row.batch = rows;
  row.samples_per_s = static_cast<double>(done * rows) / elapsed;
  // The T x N rows go forward and backward, the N bootstrap rows forward only.
  const double flops = step_flops(hidden, rows) + forward_flops(hidden, envs);
  row.gflop_per_s = flops * static_cast<double>(done) / elapsed / 1e9;
  return row;
}

// The environment runners' policy: the store policy's actor forward and
// categorical sampling on `rows` observations per call.
bench_row time_acting(std::vector<int64_t> hidden, size_t rows, double min_seconds) {
  learners::model_spec spec;
  spec.obs_dim = bench_obs_dim;
  spec.n = bench_actions;
  spec.hidden = hidden;
  learners::actor_critic model(spec, 1);
  auto store = std::make_shared<actors::policy_store>(model, 1);
  auto policy = actors::make_store_policy(store, size_t{1} << 30);
  synthetic_batch data(rows);
  std::vector<float> actions(rows), logp(rows);
  base::rng gen(7);
  for (int i = 0; i < 10; ++i) {
    auto acted = policy(data.obs.data(), rows, gen, actions.data(), logp.data());
    TROUPE_CHECK(acted.ok(), "the bench model acts: {}",
                 acted.ok() ? "" : acted.err().message);
  }
  size_t calls = 0;
  auto start = clock_type::now();
  double elapsed = 0;
  do {
    for (int i = 0; i < 100; ++i, ++calls) {
      auto acted = policy(data.obs.data(), rows, gen, actions.data(), logp.data());
      TROUPE_CHECK(acted.ok(), "the bench model acts: {}",
                   acted.ok() ? "" : acted.err().message);
    }
    elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
  } while (elapsed < min_seconds);
  bench_row row;
  row.kind = bench_kind::act;
  row.device = "cpu";
  row.hidden = hidden;
  row.batch = rows;
  row.samples_per_s = static_cast<double>(calls * rows) / elapsed;
  // The actor network only: its layers, then the head.
  double flops = 0;
  int64_t in = bench_obs_dim;
  std::vector<int64_t> widths = hidden;
  widths.push_back(bench_actions);
  for (int64_t w : widths) {
    flops += 2.0 * static_cast<double>(rows) * static_cast<double>(in * w);
    in = w;
  }
  row.gflop_per_s = flops * static_cast<double>(calls) / elapsed / 1e9;
  return row;
}

} // namespace

int bench_learner(const args_t& args) {
  std::vector<arg_spec> specs{
    {"json", false, false, "print one JSON array instead of a table"},
    {"device", true, false, "cpu, cuda or all (default: all present)"},
    {"seconds", true, false, "minimum seconds per case (default 1)"},
    {"cases", true, false,
     "PPO cases as WIDTHxBATCH,... (hidden [WIDTH,WIDTH]; default: 64x512, 64x4096, "
     "256x512, 256x4096, and 256x65536 on a GPU)"}};
  auto parsed = parse_args("bench learner", args, specs);
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  auto seconds = parsed->get_float("seconds", 1.0, 0.01, 600.0);
  if (!seconds)
    return fail(exit_bad_input, seconds.err().message);
  std::string which = parsed->get("device").value_or("all");
  if (which != "cpu" && which != "cuda" && which != "all")
    return fail(
      exit_bad_input,
      fmt::format("bench learner: --device must be cpu, cuda or all, got '{}'", which));
  std::vector<learners::device_kind> devices;
  if (which != "cuda")
    devices.push_back(learners::device_kind::cpu);
  // Asks the driver first: a CPU-only run loads no CUDA library.
  auto gpus =
    which == "cpu" ? result<int>(0) : learners::process_cuda_loader().usable_gpus();
  const bool have_gpu = gpus && *gpus > 0;
  if (which == "cuda" && !have_gpu)
    return fail(exit_failure,
                fmt::format("bench learner: --device cuda but {}", gpus.err().message));
  if (which != "cpu" && have_gpu)
    devices.push_back(learners::device_kind::cuda);
  const bool json = parsed->flag("json");
  if (!json) {
    // What a run with device = "auto" would pick, and why.
    if (auto choice = learners::choose_device("auto"))
      fmt::print("auto device: {} ({})\n", learners::to_string(choice->kind),
                 choice->reason);
  }

  std::vector<bench_case> cases{
    {{64, 64}, 512}, {{64, 64}, 4096}, {{256, 256}, 512}, {{256, 256}, 4096}};
  const auto chosen = parsed->get("cases");
  if (chosen) {
    auto given = parse_bench_cases(*chosen);
    if (!given)
      return fail(exit_bad_input, fmt::format("bench learner: {}", given.err().message));
    cases = std::move(*given);
  }
  std::vector<bench_row> rows;
  std::map<size_t, double> floor_of; // cuBLAS floor by batch * 1000 + width
  for (auto device : devices) {
    auto device_cases = cases;
    if (device == learners::device_kind::cuda && !chosen)
      device_cases.push_back({{256, 256}, 65536});
    for (const auto& c : device_cases) {
      auto row = time_case(device, c, *seconds);
      if (!row)
        return fail(exit_failure, fmt::format("bench learner: {}", row.err().message));
      if (device == learners::device_kind::cuda) {
        const size_t h = static_cast<size_t>(c.hidden.back());
        auto floor = learners::cuda_sgemm_gflops(c.batch, h, h, 0.3);
        if (!floor)
          return fail(exit_failure,
                      fmt::format("bench learner: {}", floor.err().message));
        row->floor_gflop_per_s = *floor;
        floor_of[c.batch * 1000 + h] = *floor;
      }
      rows.push_back(*row);
    }
    // On the CPU a whole update is its minibatch steps in a loop, on one
    // thread or with actor and critic on two (algo.learner_threads; CartPole
    // PPO's minibatch of 128 rows added); the CUDA backend runs it as one graph.
    auto update_cases = device_cases;
    if (device == learners::device_kind::cpu && !chosen)
      update_cases.insert(update_cases.begin(), bench_case{{64, 64}, 128});
    for (const auto& c : update_cases) {
      if (device == learners::device_kind::cpu) {
        for (unsigned t : {1u, 2u}) {
          if (t == 2 && std::thread::hardware_concurrency() < 2)
            break;
          auto row = time_update(device, c, *seconds, t);
          if (!row)
            return fail(exit_failure,
                        fmt::format("bench learner: {}", row.err().message));
          rows.push_back(*row);
        }
        continue;
      }
      auto row = time_update(device, c, *seconds);
      if (!row)
        return fail(exit_failure, fmt::format("bench learner: {}", row.err().message));
      row->floor_gflop_per_s =
        floor_of[c.batch * 1000 + static_cast<size_t>(c.hidden.back())];
      rows.push_back(*row);
    }
    for (auto [steps, envs] : {std::pair<size_t, size_t>{32, 32}, {16, 64}}) {
      auto row = time_vtrace(device, {64, 64}, steps, envs, *seconds);
      if (!row)
        return fail(exit_failure, fmt::format("bench learner: {}", row.err().message));
      rows.push_back(*row);
    }
  }
  if (which != "cuda")
    for (size_t n : {size_t{32}, size_t{256}})
      rows.push_back(time_acting({64, 64}, n, *seconds));
  if (json) {
    runtime::json out = runtime::json::array();
    for (const auto& r : rows) {
      runtime::json row;
      row["kind"] = to_string(r.kind);
      row["device"] = r.device;
      row["hidden"] = r.hidden;
      row["batch"] = r.batch;
      row["samples_per_s"] = rounded(r.samples_per_s, 1);
      row["gemm_gflop_per_s"] = rounded(r.gflop_per_s, 2);
      if (r.floor_gflop_per_s > 0)
        row["floor_gflop_per_s"] = rounded(r.floor_gflop_per_s, 2);
      if (r.kind == bench_kind::vtrace)
        row["steps"] = r.steps;
      if (r.kind == bench_kind::update)
        row["minibatches"] = update_minibatches;
      if (r.threads > 0)
        row["threads"] = r.threads;
      out.push_back(std::move(row));
    }
    std::fputs(json_line(out).c_str(), stdout);
    return 0;
  }
  fmt::print("obs 4, 2 actions, tanh\n");
  std::optional<bench_kind> shown;
  for (const auto& r : rows) {
    if (r.kind != shown) {
      shown = r.kind;
      switch (r.kind) {
      case bench_kind::ppo:
        fmt::print("PPO step (forward, backward, clip, Adam)\n");
        break;
      case bench_kind::update:
        fmt::print("whole PPO update: {} minibatches of batch rows, one epoch (CUDA: one "
                   "graph per update; cpu x2: actor and critic on two threads)\n",
                   update_minibatches);
        break;
      case bench_kind::vtrace:
        fmt::print("V-trace step (T x N transitions + N bootstrap rows forward)\n");
        break;
      case bench_kind::act:
        fmt::print("acting: store policy (actor forward, categorical sampling), "
                   "rows per call as batch; ns per row = 1e9 / rows per s\n");
        break;
      }
      fmt::print("{:<7} {:<11} {:>7} {:>16} {:>12}\n", "device", "hidden", "batch",
                 "samples/s", "GEMM GFLOP/s");
    }
    if (r.kind == bench_kind::act) {
      fmt::print("{:<7} {:<11} {:>7} {:>16.0f} {:>12.2f}  ({:.0f} ns per row)\n",
                 r.device, fmt::format("[{}]", fmt::join(r.hidden, ",")), r.batch,
                 r.samples_per_s, r.gflop_per_s, 1e9 / r.samples_per_s);
      continue;
    }
    const std::string batch = r.kind == bench_kind::vtrace
                                ? fmt::format("{}x{}", r.steps, r.batch / r.steps)
                                : std::to_string(r.batch);
    const std::string device =
      r.threads > 0 ? fmt::format("{} x{}", r.device, r.threads) : r.device;
    fmt::print("{:<7} {:<11} {:>7} {:>16.0f} {:>12.2f}", device,
               fmt::format("[{}]", fmt::join(r.hidden, ",")), batch, r.samples_per_s,
               r.gflop_per_s);
    if (r.floor_gflop_per_s > 0)
      fmt::print("  ({:.0f}% of cuBLAS SGEMM at this shape, {:.0f} GFLOP/s)",
                 100.0 * r.gflop_per_s / r.floor_gflop_per_s, r.floor_gflop_per_s);
    fmt::print("\n");
  }
  if (which != "cuda") {
    fmt::print("floor: the forward pass's float GEMM (Eigen), one thread; {} hardware "
               "threads\n",
               std::thread::hardware_concurrency());
    for (auto [m, k, n] : {std::tuple{4096, 64, 64}, std::tuple{4096, 256, 256},
                           std::tuple{1024, 1024, 1024}})
      fmt::print("  [{}x{}]*[{}x{}]: {:.2f} GFLOP/s\n", m, k, k, n,
                 learners::gemm_gflops(m, k, n, 0.3));
  }
  return 0;
}

} // namespace troupe::runtime
