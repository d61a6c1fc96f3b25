// `troupe eval CHECKPOINT`: evaluation episodes with a checkpoint's policy.
// Deterministic actions by default (argmax of the logits; the Gaussian mean
// clipped to the Box), sampled with --stochastic. Episode i is reset with
// seed S + i, so the same command gives the same episodes.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "envs/registry.hpp"
#include "base/rng.hpp"
#include "learners/checkpoint.hpp"
#include "learners/rollout.hpp"
#include "runtime/cli/args.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/json.hpp"

namespace troupe::runtime {

namespace {

// -- matching policy and environment -------------------------------------------

std::string describe_head(const learners::model_spec& spec) {
  if (spec.action == learners::action_kind::discrete)
    return fmt::format("obs_dim {} and a discrete head of {} actions", spec.obs_dim,
                       spec.n);
  return fmt::format("obs_dim {} and a Gaussian head of {} dimensions", spec.obs_dim,
                     spec.act_dim);
}

status check_match(const learners::model_spec& spec, const envs::env_spec& env,
                   const std::string& policy_path) {
  const auto& obs = env.observation_space;
  const auto& act = env.action_space;
  bool obs_ok = static_cast<int64_t>(obs.size()) == spec.obs_dim;
  bool act_ok = spec.action == learners::action_kind::discrete
                  ? act.kind == envs::space_kind::discrete && act.n == spec.n
                  : act.kind == envs::space_kind::box &&
                      static_cast<int64_t>(act.size()) == spec.act_dim;
  if (obs_ok && act_ok)
    return ok_status();
  return make_error(errc::dimension_mismatch,
                    "{} does not fit {}: the policy has {}; the environment has "
                    "observation space {} and action space {}",
                    policy_path, env.id, describe_head(spec), obs.describe(),
                    act.describe());
}

// -- acting --------------------------------------------------------------------

struct episode_stats {
  std::vector<double> returns;
  std::vector<double> lengths;
};

struct eval_options {
  std::string env_id;
  int64_t episodes = 10;
  uint64_t seed = 0;
  bool stochastic = false;
};

result<episode_stats> run_episodes(const learners::policy_checkpoint& policy,
                                   const eval_options& options) {
  auto made = envs::make_env(options.env_id);
  if (!made)
    return made.err();
  auto& env = **made;
  const auto& spec = policy.model.spec();
  const auto* obs_stats = spec.obs_norm ? &policy.obs_stats : nullptr;
  const auto& action_space = env.spec().action_space;
  const size_t head = static_cast<size_t>(spec.head_dim());
  // The sampling stream is apart from the environments' seeds.
  base::rng gen(options.seed ^ 0x5eed0fa11c7ull);

  std::vector<float> obs(env.spec().observation_space.size());
  std::vector<float> next_obs(obs.size());
  std::vector<float> action(action_space.size());
  learners::policy_output out;
  episode_stats stats;
  for (int64_t episode = 0; episode < options.episodes; ++episode) {
    env.reset(options.seed + static_cast<uint64_t>(episode), obs.data());
    double total = 0;
    int64_t length = 0;
    while (true) {
      auto evaluated = policy.model.evaluate(obs.data(), 1, obs_stats, out);
      if (!evaluated)
        return evaluated.err();
      // The learners' action selection (learners/rollout.hpp), as the runners act.
      if (spec.action == learners::action_kind::discrete) {
        if (options.stochastic)
          learners::sample_categorical(out.logits.data(), 1, head, gen, action.data(),
                                       nullptr);
        else
          learners::most_likely_categorical(out.logits.data(), 1, head, action.data());
      } else {
        if (options.stochastic)
          learners::sample_gaussian(out.mean.data(), out.log_std.data(), 1, head, gen,
                                    action.data(), nullptr);
        else
          std::copy(out.mean.begin(), out.mean.begin() + head, action.begin());
        // Gymnasium's ClipAction, as CleanRL evaluates continuous policies.
        for (size_t j = 0; j < head; ++j)
          action[j] = std::clamp(action[j], action_space.low[j], action_space.high[j]);
      }
      auto stepped = env.step(action.data(), next_obs.data());
      if (!stepped)
        return make_error(stepped.err().code, "{} episode {} step {}: {}", options.env_id,
                          episode, length, stepped.err().message);
      if (!std::isfinite(stepped->reward))
        return make_error(errc::non_finite,
                          "{} episode {} step {}: reward {} is not finite",
                          options.env_id, episode, length, stepped->reward);
      if (!std::all_of(next_obs.begin(), next_obs.end(),
                       [](float x) { return std::isfinite(x); }))
        return make_error(errc::non_finite,
                          "{} episode {} step {}: the observation is not "
                          "finite",
                          options.env_id, episode, length);
      total += stepped->reward;
      ++length;
      obs.swap(next_obs);
      if (stepped->terminated || stepped->truncated)
        break;
    }
    stats.returns.push_back(total);
    stats.lengths.push_back(static_cast<double>(length));
  }
  return stats;
}

// -- output --------------------------------------------------------------------

struct summary {
  double mean = 0, std = 0, min = 0, max = 0;
};

// Mean, population standard deviation (numpy's default), min and max.
summary summarize(const std::vector<double>& xs) {
  summary s;
  double sum = 0;
  for (double x : xs)
    sum += x;
  s.mean = sum / static_cast<double>(xs.size());
  double squares = 0;
  for (double x : xs)
    squares += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(squares / static_cast<double>(xs.size()));
  s.min = *std::min_element(xs.begin(), xs.end());
  s.max = *std::max_element(xs.begin(), xs.end());
  return s;
}

} // namespace

int cmd_eval(const args_t& args) {
  static const std::vector<arg_spec> specs = {
    {"env", true, false, "environment id (default: the checkpoint's env_id metadata)"},
    {"episodes", true, false, "number of episodes (default 10)"},
    {"seed", true, false, "episode i is reset with seed S + i (default 0)"},
    {"stochastic", false, false, "sample actions instead of taking the most likely"},
    {"json", false, false, "print one JSON object"},
  };
  auto parsed = parse_args("troupe eval", args, specs);
  if (!parsed)
    return fail(exit_bad_input, parsed.err().message);
  auto usage = [&] {
    return fmt::format("usage: troupe eval CHECKPOINT [--env ID] [--episodes N] "
                       "[--seed S] [--stochastic] [--json]\n"
                       "CHECKPOINT: a policy .safetensors file, a checkpoint folder "
                       "holding one, or a run folder (its newest checkpoint)\n{}",
                       describe_args(specs));
  };
  if (parsed->positional.size() != 1)
    return fail(exit_bad_input, fmt::format("eval: expected one CHECKPOINT, got {}\n{}",
                                            parsed->positional.size(), usage()));
  eval_options options;
  auto episodes = parsed->get_int("episodes", 10, 1, 1000000);
  if (!episodes)
    return fail(exit_bad_input, episodes.err().message);
  options.episodes = *episodes;
  auto seed = parsed->get_int("seed", 0, 0, int64_t{1} << 62);
  if (!seed)
    return fail(exit_bad_input, seed.err().message);
  options.seed = static_cast<uint64_t>(*seed);
  options.stochastic = parsed->flag("stochastic");

  auto policy_path =
    learners::resolve_policy_file(parsed->positional[0], [](const std::string& why) {
      std::fprintf(stderr, "troupe: %s\n", why.c_str());
    });
  if (!policy_path)
    return fail(exit_bad_input, policy_path.err().message);
  auto policy = learners::load_checkpoint(*policy_path);
  if (!policy)
    return fail(exit_bad_input, policy.err().message);

  if (auto env = parsed->get("env")) {
    options.env_id = *env;
  } else if (auto it = policy->metadata.find("env_id"); it != policy->metadata.end()) {
    options.env_id = it->second;
  } else {
    return fail(
      exit_bad_input,
      fmt::format("{}: the checkpoint names no environment (no env_id metadata); "
                  "give one with --env ID",
                  *policy_path));
  }
  auto env_spec = envs::find_spec(options.env_id);
  if (!env_spec)
    return fail(exit_bad_input, env_spec.err().message);
  if (auto match = check_match(policy->model.spec(), **env_spec, *policy_path); !match)
    return fail(exit_bad_input, match.err().message);

  auto stats = run_episodes(*policy, options);
  if (!stats)
    return fail(exit_failure, stats.err().message);
  const auto returns = summarize(stats->returns);
  const auto lengths = summarize(stats->lengths);
  if (parsed->flag("json")) {
    json out;
    out["episodes"] = options.episodes;
    out["return_mean"] = returns.mean;
    out["return_std"] = returns.std;
    out["return_min"] = returns.min;
    out["return_max"] = returns.max;
    out["length_mean"] = lengths.mean;
    out["env_id"] = options.env_id;
    out["stochastic"] = options.stochastic;
    out["seed"] = options.seed;
    out["checkpoint"] = *policy_path;
    std::fputs(json_line(out).c_str(), stdout);
    return 0;
  }
  std::printf("%s\n%s: %lld %s episodes, seeds %llu..%llu\n"
              "return  mean %.3f  std %.3f  min %.3f  max %.3f\n"
              "length  mean %.1f  min %.0f  max %.0f\n",
              policy_path->c_str(), options.env_id.c_str(),
              static_cast<long long>(options.episodes),
              options.stochastic ? "stochastic" : "deterministic",
              static_cast<unsigned long long>(options.seed),
              static_cast<unsigned long long>(options.seed + options.episodes - 1),
              returns.mean, returns.std, returns.min, returns.max, lengths.mean,
              lengths.min, lengths.max);
  return 0;
}

} // namespace troupe::runtime
